package footer

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/testing/memwatch"
)

// rawBundle is a bundle whose metadata region holds meta as it is, however
// the packer would have refused it.
func rawBundle(meta []byte) []byte {
	bin := []byte("\x7fELF not really an executable")
	t := newTrailer(0, uint32(len(meta)), sha256.Sum256(bin))
	tb, _ := t.MarshalBinary()
	return bytes.Join([][]byte{bin, meta, tb}, nil)
}

// Issue 19, hole 6: a 7 MB manifest of short values took 504 MB to read
// (the YAML parser's nodes), and every task start reads the bundle's own.
// It is now refused before it is parsed, in a few MiB.
func TestLargeManifestIsRefusedBeforeItIsParsed(t *testing.T) {
	meta := []byte("sdk: {supervisor_schema_version: \"2026-06-16\"}\ndags: {d: {tasks: [t]}}\nx: [" + strings.Repeat("1,", 3_500_000) + "1]\n")
	b := rawBundle(meta)
	watch := memwatch.Start()
	_, err := ReadFrom(bytes.NewReader(b), int64(len(b)))
	peak := watch.Stop()
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "YAML values, over the limit") {
		t.Fatalf("want a refusal saying the manifest holds too many values, got %v", err)
	}
	t.Logf("a %d-byte manifest: heap growth %d MiB", len(meta), peak.HeapGrowth()>>20)
	if peak.HeapGrowth() > 32<<20 {
		t.Fatalf("reading the %d-byte manifest grew the heap by %d MiB; want it refused before parsing", len(meta), peak.HeapGrowth()>>20)
	}
	for name, decode := range map[string]func([]byte) (Manifest, error){"ParseManifest": ParseManifest, "DecodeManifest": DecodeManifest} {
		if _, err := decode(meta); err == nil {
			t.Errorf("%s accepted it", name)
		}
	}
	// A metadata region larger than any manifest is refused unread.
	huge := rawBundle(make([]byte, MaxManifestSize+1))
	if _, err := ReadFrom(bytes.NewReader(huge), int64(len(huge))); err == nil || !strings.Contains(err.Error(), "over the") {
		t.Fatalf("a %d-byte metadata region: got %v", MaxManifestSize+1, err)
	}
}
