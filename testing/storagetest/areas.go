package storagetest

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

var buckets atomic.Int64

// NewBucketName is a bucket name no other area of this process uses.
func NewBucketName() string { return fmt.Sprintf("area-%d", buckets.Add(1)) }

// FileArea is a fresh directory, added to the test's file:// roots
// (storage.FileRootsEnv); it also returns the directory.
func FileArea(t testing.TB) (Area, string) {
	root := t.TempDir()
	AllowFiles(t, root)
	return Area{
		URL: func(key string) string { return "file://" + filepath.Join(root, key) },
		Objects: func(t testing.TB) []string {
			var out []string
			err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					rel, _ := filepath.Rel(root, p)
					out = append(out, rel)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(out)
			return out
		},
	}, root
}

// Connection is an Area's Connect for conn, parsed by the store scheme's
// driver as a task's would be (an error fails the test): a handle reaches
// the area's URLs, which name no connection, with it.
func Connection(t testing.TB, scheme string, conn connections.Connection) func(*storage.Handle) {
	t.Helper()
	c, err := storage.Default.FromConnection(scheme, conn)
	if err != nil {
		t.Fatalf("connection %s for %s://: %v", conn.ConnID, scheme, err)
	}
	return func(h *storage.Handle) { h.Connect(scheme, "", c) }
}

// AllowFiles adds dir to storage.FileRootsEnv for the rest of the test, as
// an operator would, so file:// URLs under it may be read and written.
func AllowFiles(t testing.TB, dir string) {
	roots := os.Getenv(storage.FileRootsEnv)
	if roots != "" {
		roots += string(os.PathListSeparator)
	}
	t.Setenv(storage.FileRootsEnv, roots+dir)
}
