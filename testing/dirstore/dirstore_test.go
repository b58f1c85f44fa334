package dirstore_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/testing/dirstore"
	"github.com/airflow-sandbox/airflow-go-worker/testing/storagetest"
)

// The store passes the suite every store passes, from its own test.
func TestConformance(t *testing.T) {
	storagetest.Run(t, storagetest.Target{Name: dirstore.Scheme, New: Area})
}

// Area is a fresh bucket under a fresh root, reached through a dirstore
// connection as a task's would be.
func Area(t testing.TB) storagetest.Area {
	root := t.TempDir()
	bucket := storagetest.NewBucketName()
	dir := filepath.Join(root, bucket)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return storagetest.Area{
		Connect: storagetest.Connection(t, dirstore.Scheme, connections.Connection{ConnID: "dirs", ConnType: "dirstore", Host: root}),
		URL:     func(key string) string { return "dir://" + bucket + "/" + key },
		Objects: func(t testing.TB) []string {
			var out []string
			err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					rel, _ := filepath.Rel(dir, p)
					out = append(out, filepath.ToSlash(rel))
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(out)
			return out
		},
		MissingBucket: "dir://no-such-bucket/k",
	}
}
