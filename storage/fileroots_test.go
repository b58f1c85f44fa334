package storage

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestFileRootsSetting(t *testing.T) {
	dir := t.TempDir()
	for env, want := range map[string]string{
		"relative/dir":               "not an absolute path",
		filepath.Join(dir, "absent"): "cannot be used",
	} {
		t.Setenv(FileRootsEnv, env)
		if _, _, err := confine(filepath.Join(dir, "x")); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=%s: got %v, want %q", FileRootsEnv, env, err, want)
		}
	}
	inner := filepath.Join(dir, "inner")
	os.Mkdir(inner, 0o755)
	t.Setenv(FileRootsEnv, dir+":"+inner+"::")
	r, rel, err := confine(filepath.Join(inner, "a", "b"))
	if err != nil || r.dir != inner || rel != "a/b" {
		t.Fatalf("nested roots: %+v %q %v; want the innermost", r, rel, err)
	}
}

// Reads and writes outside the roots fail with nothing read or written;
// inside, a directory or pipe is not read as a file.
func TestFileURLsOutsideTheRootsAreRefused(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	t.Setenv(FileRootsEnv, root)
	ctx := context.Background()
	if _, err := openURL(ctx, "file:///etc/shadow", Options{}); err == nil || !strings.Contains(err.Error(), "outside the directories") {
		t.Fatalf("reading /etc/shadow: %v", err)
	}
	target := filepath.Join(outside, "planted")
	if _, err := putURL(ctx, "file://"+target, strings.NewReader("x"), Options{}); err == nil {
		t.Fatal("a write outside the roots succeeded")
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("written outside the roots: %v", entries)
	}
	if err := checkURL(ctx, "file://"+target, false); err == nil || !strings.Contains(err.Error(), FileRootsEnv) {
		t.Fatalf("Check should refuse before anything runs: %v", err)
	}
	fifo := filepath.Join(root, "pipe")
	syscall.Mkfifo(fifo, 0o644)
	for _, p := range []string{fifo, root + "/"} {
		if _, err := openURL(ctx, "file://"+strings.TrimSuffix(p, "/")+"/", Options{}); err == nil {
			t.Errorf("%s: read as a file", p)
		}
	}
	if _, err := openURL(ctx, "file://"+fifo, Options{}); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a named pipe: %v", err)
	}
}
