package storage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
)

// files writes each name (relative to dir) with its own name as content.
func files(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func urls(l []Listed) []string {
	out := make([]string, len(l))
	for i, o := range l {
		out[i] = o.URL
	}
	return out
}

func TestListFiles(t *testing.T) {
	root := t.TempDir()
	t.Setenv(FileRootsEnv, root)
	files(t, root, "in/b.csv", "in/a.csv", "in/sub/c.csv", "in/notes.txt", "inbox/x.csv",
		"in/a.csv.0123456789ab.partial", "in/.b.csv.89abcdef.tmp")
	ctx := context.Background()
	base := "file://" + root + "/"
	for _, c := range []struct {
		prefix, match string
		want          []string
	}{
		// Sorted, nested included, the sibling inbox/ and export leftovers left out.
		{"in/", "", []string{"in/a.csv", "in/b.csv", "in/notes.txt", "in/sub/c.csv"}},
		{"in/", "*.csv", []string{"in/a.csv", "in/b.csv", "in/sub/c.csv"}},
		// A key prefix, not a directory: in/ and inbox/ both start with "in".
		{"in", "*.csv", []string{"in/a.csv", "in/b.csv", "in/sub/c.csv", "inbox/x.csv"}},
		{"in/s", "", []string{"in/sub/c.csv"}},
		{"missing/", "", nil},
	} {
		got, err := listURL(ctx, base+c.prefix, c.match, 10)
		if err != nil {
			t.Fatalf("List(%s, %q): %v", c.prefix, c.match, err)
		}
		want := make([]string, len(c.want))
		for i, w := range c.want {
			want[i] = base + w
		}
		if !slices.Equal(urls(got), want) {
			t.Errorf("List(%s, %q) = %v, want %v", c.prefix, c.match, urls(got), want)
		}
		for _, o := range got {
			if o.Size != int64(len(strings.TrimPrefix(o.URL, base))) || o.Modified.IsZero() {
				t.Errorf("%s: size %d, modified %v", o.URL, o.Size, o.Modified)
			}
		}
	}
}

func TestListRefusals(t *testing.T) {
	root := t.TempDir()
	t.Setenv(FileRootsEnv, root)
	files(t, root, "in/a.csv", "in/b.csv", "in/c.csv")
	ctx := context.Background()
	// The listing itself works, so each refusal below is the refusal's.
	if got, err := listURL(ctx, "file://"+root+"/in/", "", 3); err != nil || len(got) != 3 {
		t.Fatalf("three objects under a limit of three: %v, %v", got, err)
	}
	_, err := listURL(ctx, "file://"+root+"/in/", "", 2)
	if !errors.Is(err, ErrTooMany) || !final.Is(err) || !strings.Contains(err.Error(), "narrower prefix") {
		t.Errorf("over the limit: want a final ErrTooMany saying what to do, got %v", err)
	}
	for _, c := range []struct{ prefix, match, want string }{
		{"file:///etc/", "", FileRootsEnv},                // outside the file roots
		{"file://" + root + "/in/", "[", "shell pattern"}, // a bad pattern
		{"file://" + root + "/../in/", "", ".."},          // a .. segment
		{"nope://bucket/", "", "nope"},
	} {
		if _, err := listURL(ctx, c.prefix, c.match, 10); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("List(%s, %q): want an error naming %q, got %v", c.prefix, c.match, c.want, err)
		}
	}
	if _, err := listURL(ctx, "file://"+root+"/in/", "", 0); err == nil {
		t.Error("a limit of 0 must be refused")
	}
}

// A symlink inside a file root to a directory outside it is not followed:
// the listing shows what is in the root, nothing beyond.
func TestListStaysInTheFileRoot(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	t.Setenv(FileRootsEnv, root)
	files(t, root, "in/mine.csv")
	files(t, outside, "secret.csv")
	if err := os.Symlink(outside, filepath.Join(root, "in", "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret.csv"), filepath.Join(root, "in", "file-link.csv")); err != nil {
		t.Fatal(err)
	}
	got, err := listURL(context.Background(), "file://"+root+"/in/", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"file://" + root + "/in/mine.csv"}; !slices.Equal(urls(got), want) {
		t.Fatalf("listed %v, want only %v", urls(got), want)
	}
}
