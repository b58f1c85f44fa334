package tasks

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// realStorageEnv is newEnv with package storage behind the tasks, as in a
// deployed worker, and rootDir as the only file:// root.
func realStorageEnv(t *testing.T, rootDir string) *env {
	e := newEnv(t)
	e.deps.Stores = nil // storage.Default, with the real file:// store
	t.Setenv(storage.FileRootsEnv, rootDir)
	return e
}

// Issue 10, hole 1 (file part): file:// was rooted at / with no limit, so a
// run that could set stage_in read /etc/shadow into its log and XCom. Now
// file:// must lie under the operator's roots, and a refused source fails
// provision before any sandbox exists.
func TestStageInOfAHostFileIsRefused(t *testing.T) {
	for name, roots := range map[string]string{"no roots": "", "elsewhere": t.TempDir()} {
		t.Run(name, func(t *testing.T) {
			e := realStorageEnv(t, roots)
			_, err := Provision(context.Background(), e.deps, decodeInput[ProvisionInput](t, `{"stage_in": {"s": "file:///etc/shadow"}}`))
			want := "outside the directories file:// may use"
			if roots == "" {
				want = storage.FileRootsEnv + " is not set"
			}
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "file:///etc/shadow") {
				t.Fatalf("want a refusal saying %q, got %v", want, err)
			}
			if len(e.drv.creates) != 0 {
				t.Fatal("a sandbox was created for a refused stage_in")
			}
		})
	}
}

// A symlink inside a root that leads out of it does not widen the root:
// neither a read nor a write goes through it.
func TestFileRootsHoldAgainstSymlinks(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret"), 0o600)
	os.Symlink(outside, filepath.Join(root, "link"))
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "secret-link"))
	e := realStorageEnv(t, root)
	for _, src := range []string{"file://" + root + "/link/secret", "file://" + root + "/secret-link"} {
		_, err := Provision(context.Background(), e.deps, decodeInput[ProvisionInput](t, `{"stage_in": {"s": "`+src+`"}}`))
		if err == nil || !strings.Contains(err.Error(), "outside the directories") {
			t.Errorf("stage_in %s: %v", src, err)
		}
	}
	id := provisionWithFile(t, e, "out.txt", "payload", 0o644)
	_, err := Export(context.Background(), e.deps, ExportInput{Sandbox: SandboxRef{ID: id}, Exports: map[string]string{"out.txt": "file://" + root + "/link/dropped"}})
	if err == nil || !strings.Contains(err.Error(), "outside the directories") {
		t.Fatalf("export through a symlink out of the root: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "dropped")); err == nil {
		t.Fatal("the export was written outside the root")
	}
}

// provisionWithFile makes a sandbox holding name with content and mode.
func provisionWithFile(t *testing.T, e *env, name, content string, mode os.FileMode) string {
	t.Helper()
	id, err := Provision(context.Background(), e.deps, ProvisionInput{})
	if err != nil {
		t.Fatal(err)
	}
	p := e.drv.host(id, "/workspace/"+name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, mode)
	return id
}

// Issue 10, hole 1: with only a conf, a run wrote a file into /etc through
// exports. A destination outside the roots is refused, nothing written.
func TestExportIntoAHostDirectoryIsRefused(t *testing.T) {
	e := realStorageEnv(t, t.TempDir())
	id := provisionWithFile(t, e, "job", "# a cron entry would go here\n", 0o644)
	dest := "/etc/cron.d/airflow-go-worker-test-" + sandbox.RandomHex(6)
	t.Cleanup(func() { os.Remove(dest) }) // should the refusal ever fail
	_, err := Export(context.Background(), e.deps, ExportInput{Sandbox: SandboxRef{ID: id}, Exports: map[string]string{"job": "file://" + dest}})
	if err == nil || !strings.Contains(err.Error(), "outside the directories") {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Stat(dest); err == nil {
		t.Fatal("the export was written into /etc")
	}
}

// Issue 10, hole 6: an export to file:///dev/null replaced the host's
// /dev/null with a regular file. A destination that exists and is not a
// regular file is refused and left as it was: a device (made here in a
// root, as /dev/null is), a named pipe, a directory, a symlink.
func TestExportRefusesToReplaceWhatIsNotARegularFile(t *testing.T) {
	root := t.TempDir()
	e := realStorageEnv(t, root)
	id := provisionWithFile(t, e, "out", "data", 0o644)
	targets := map[string]func(p string) error{
		"fifo":    func(p string) error { return syscall.Mkfifo(p, 0o644) },
		"dir":     func(p string) error { return os.Mkdir(p, 0o755) },
		"symlink": func(p string) error { return os.Symlink(filepath.Join(root, "elsewhere"), p) },
	}
	if os.Geteuid() == 0 {
		// The same device numbers as /dev/null, in a directory of our own.
		targets["device"] = func(p string) error { return syscall.Mknod(p, syscall.S_IFCHR|0o666, 1<<8|3) }
	}
	for name, mk := range targets {
		p := filepath.Join(root, name)
		if err := mk(p); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		before, _ := os.Lstat(p)
		_, err := Export(context.Background(), e.deps, ExportInput{Sandbox: SandboxRef{ID: id}, Exports: map[string]string{"out": "file://" + p}})
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s: want a refusal, got %v", name, err)
		}
		after, err := os.Lstat(p)
		if err != nil || after.Mode() != before.Mode() {
			t.Errorf("%s: the destination was replaced (mode %v -> %v)", name, before.Mode(), after.Mode())
		}
	}
	if _, err := os.Stat(filepath.Join(root, "elsewhere")); err == nil {
		t.Error("the export followed the symlink")
	}
	leftovers, _ := filepath.Glob(filepath.Join(root, "*.tmp"))
	if len(leftovers) != 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

// Issue 10, hole 6: exports widened modes (a 0640 file came out 0644).
func TestExportKeepsTheFilesMode(t *testing.T) {
	root := t.TempDir()
	e := realStorageEnv(t, root)
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	for _, files := range []map[string]os.FileMode{{"a": 0o640}, {"b": 0o600, "c": 0o644}} {
		id, err := Provision(context.Background(), e.deps, ProvisionInput{})
		if err != nil {
			t.Fatal(err)
		}
		exports := map[string]string{}
		for name, mode := range files {
			p := e.drv.host(id, "/workspace/"+name)
			os.WriteFile(p, []byte(name), mode)
			os.Chmod(p, mode)
			exports[name] = "file://" + filepath.Join(root, "out", name)
		}
		if _, err := Export(context.Background(), e.deps, ExportInput{Sandbox: SandboxRef{ID: id}, Exports: exports}); err != nil {
			t.Fatal(err)
		}
		for name, mode := range files {
			fi, err := os.Stat(filepath.Join(root, "out", name))
			if err != nil || fi.Mode().Perm() != mode {
				t.Errorf("%s exported with mode %v, want %v (%v)", name, fi.Mode().Perm(), mode, err)
			}
		}
	}
}
