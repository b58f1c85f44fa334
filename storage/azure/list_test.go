package azure

import (
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// Azurite has no hierarchical namespace, so the directory blobs a Data
// Lake Gen2 account lists are shown here as the service sends them.
func TestListedSkipsDirectories(t *testing.T) {
	str := func(s string) *string { return &s }
	size, at := int64(42), time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	props := &container.BlobProperties{ContentLength: &size, LastModified: &at}
	for _, tc := range []struct {
		what string
		item container.BlobItem
		want bool
	}{
		{"a blob", container.BlobItem{Name: str("in/a.csv"), Properties: props}, true},
		{"a blob with other metadata", container.BlobItem{Name: str("in/b"), Properties: props, Metadata: map[string]*string{"owner": str("x"), "hdi_isfolder": str("false")}}, true},
		{"a Gen2 directory", container.BlobItem{Name: str("in/sub"), Properties: props, Metadata: map[string]*string{"hdi_isfolder": str("true")}}, false},
		{"a Gen2 directory, other spelling", container.BlobItem{Name: str("in/sub"), Properties: props, Metadata: map[string]*string{"Hdi_IsFolder": str("TRUE")}}, false},
		{"a folder placeholder", container.BlobItem{Name: str("in/folder/"), Properties: props}, false},
	} {
		o, ok := listed(&tc.item)
		if ok != tc.want {
			t.Errorf("%s: listed=%v, want %v", tc.what, ok, tc.want)
		}
		if ok && (o.Key != *tc.item.Name || o.Size != size || !o.Modified.Equal(at)) {
			t.Errorf("%s: %+v", tc.what, o)
		}
	}
}
