package tasks

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/storage"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/hashicorp/go-hclog"
)

// failAfter yields n bytes of 'x', then fails: an export cut mid-stream.
type failAfter struct{ n int }

func (f *failAfter) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("stream cut")
	}
	k := min(len(p), f.n)
	copy(p, strings.Repeat("x", k))
	f.n -= k
	return k, nil
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

// Nothing is at a destination until Commit, for one file as for several,
// and a cut stream leaves nothing behind.
func TestObjectStorageExports(t *testing.T) {
	ctx := context.Background()
	log := hclog.NewNullLogger()
	dir := t.TempDir()
	t.Setenv(storage.FileRootsEnv, dir)
	url := func(name string) string { return "file://" + filepath.Join(dir, name) }

	for _, files := range [][]string{{"a", "b"}, {"c"}} {
		exp := DefaultStorage.NewExport(StorageCreds{}, log, len(files))
		for _, name := range files {
			if n, err := exp.Stage(ctx, url(name), strings.NewReader(name+"!"), 2); err != nil || n != 2 {
				t.Fatalf("stage %s: %d, %v", name, n, err)
			}
		}
		for _, name := range files {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				t.Fatalf("%s is at its destination before Commit", name)
			}
		}
		if urls, err := exp.Commit(ctx); err != nil || len(urls) != len(files) {
			t.Fatalf("commit: %v, %v", urls, err)
		}
	}
	if got := entries(t, dir); strings.Join(got, ",") != "a,b,c" {
		t.Fatalf("after the commits the directory holds %v, want a,b,c", got)
	}
	for _, files := range []int{1, 2} {
		exp := DefaultStorage.NewExport(StorageCreds{}, log, files)
		if _, err := exp.Stage(ctx, url("cut"), &failAfter{n: 100 << 10}, -1); err == nil {
			t.Fatalf("%d files: a cut stream must fail the stage", files)
		}
		if err := exp.Abort(ctx); err != nil {
			t.Fatal(err)
		}
		if got := entries(t, dir); strings.Join(got, ",") != "a,b,c" {
			t.Fatalf("%d files: a cut stream left %v behind", files, got)
		}
	}
}

// Go tasks read and write objects through the same connection handling as
// the catalogue: the connection's secret is masked.
func TestOpenAndPutObjectMaskTheConnection(t *testing.T) {
	e := newEnv(t)
	e.af.conns["lake"] = connections.Connection{ConnID: "lake", ConnType: "aws", Login: "AKIA1", Password: "lake-secret-1"}
	e.st.objects["s3://b/in.csv"] = []byte("a,b\n")
	rc, err := OpenObject(context.Background(), e.deps, "s3://b/in.csv", "lake")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "a,b\n" || !slices.Contains(e.af.masked, "lake-secret-1") {
		t.Fatalf("read %q, masked %v", got, e.af.masked)
	}
	url, err := PutObject(context.Background(), e.deps, "s3://b/out.txt", strings.NewReader("done\n"), 5, "")
	if err != nil || url != "s3://b/out.txt" || string(e.st.objects["s3://b/out.txt"]) != "done\n" {
		t.Fatalf("put: %q %v, objects %v", url, err, e.st.objects)
	}
	if _, err := OpenObject(context.Background(), e.deps, "s3://b/in.csv", "missing"); err == nil || !strings.Contains(err.Error(), `"missing"`) {
		t.Fatalf("a missing connection must be named: %v", err)
	}
}
