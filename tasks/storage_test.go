package tasks

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

// With several files, nothing is at a destination until Commit; with one,
// the file lands at once through an atomic upload (no staging copy), and a
// cut stream leaves nothing behind either way.
func TestObjectStorageExports(t *testing.T) {
	ctx := context.Background()
	log := hclog.NewNullLogger()
	dir := t.TempDir()
	url := func(name string) string { return "file://" + filepath.Join(dir, name) }

	multi := DefaultStorage.NewExport(nil, log, 2)
	for _, name := range []string{"a", "b"} {
		if n, err := multi.Stage(ctx, url(name), strings.NewReader(name+"!")); err != nil || n != 2 {
			t.Fatalf("stage %s: %d, %v", name, n, err)
		}
	}
	for _, name := range entries(t, dir) {
		if !strings.HasSuffix(name, ".partial") {
			t.Fatalf("%s is at its destination before Commit", name)
		}
	}
	if urls, err := multi.Commit(ctx); err != nil || len(urls) != 2 {
		t.Fatalf("commit: %v, %v", urls, err)
	}
	if got := entries(t, dir); strings.Join(got, ",") != "a,b" {
		t.Fatalf("after commit the directory holds %v, want a,b", got)
	}

	one := DefaultStorage.NewExport(nil, log, 1)
	if n, err := one.Stage(ctx, url("c"), strings.NewReader("see")); err != nil || n != 3 {
		t.Fatalf("stage c: %d, %v", n, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "c")); err != nil || string(b) != "see" {
		t.Fatalf("one-file export did not land at once: %q, %v", b, err)
	}
	if urls, err := one.Commit(ctx); err != nil || len(urls) != 1 || urls[0] != url("c") {
		t.Fatalf("commit: %v, %v", urls, err)
	}

	for _, files := range []int{1, 2} {
		exp := DefaultStorage.NewExport(nil, log, files)
		if _, err := exp.Stage(ctx, url("cut"), &failAfter{n: 100 << 10}); err == nil {
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

// The stream fails before its end when the file grew or shrank after the
// export began, so the upload is aborted instead of landing mixed content.
func TestExactReaderCatchesAChangedFile(t *testing.T) {
	for name, tc := range map[string]struct {
		data string
		want int64
		ok   bool
	}{
		"same":   {"12345", 5, true},
		"grew":   {"1234567", 5, false},
		"shrank": {"123", 5, false},
	} {
		_, err := io.ReadAll(&exactReader{r: strings.NewReader(tc.data), want: tc.want})
		if (err == nil) != tc.ok || (!tc.ok && !strings.Contains(err.Error(), "changed while it was exported")) {
			t.Errorf("%s: err %v", name, err)
		}
	}
}
