package local

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// nobody is the uid that plays the other host user.
const nobody = 65534

// needRoot: only root can give a file to another user. CI runs the tests as
// root; elsewhere the test says what it did not check.
func needRoot(t *testing.T) bool {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Log("not root: cannot give files to another user here; covered where tests run as root (CI)")
		return false
	}
	return true
}

func newImageDriver(t *testing.T, roots ...string) *Driver {
	t.Helper()
	d, err := New(Options{Root: t.TempDir(), ImageRoots: roots})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// hostSecret is a root-only directory holding marker, as /root would.
func hostSecret(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "secret")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "marker"), []byte("HOST SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Hole 4: the image's top-level entries were checked, then handed to
// bubblewrap as paths, which it followed with the worker's rights: an entry
// swapped for a symlink in between (a race won 16 times in 45) mounted a
// host directory. The hook swaps it at the worst moment, every time.
func TestImageEntrySwappedBeforeMountIsNotFollowed(t *testing.T) {
	rootfs := buildRootfs(t)
	secret := hostSecret(t)
	d := newImageDriver(t, filepath.Dir(rootfs))
	sb := create(t, d, sandbox.Spec{Image: rootfs})
	swapped := false
	d.beforeStart = func() {
		if swapped {
			return
		}
		swapped = true
		etc := filepath.Join(rootfs, "etc")
		if err := os.Rename(etc, etc+".orig"); err != nil {
			t.Error(err)
		}
		if err := os.Symlink(secret, etc); err != nil {
			t.Error(err)
		}
	}
	_, out, errs := run(t, sb, "read x < /etc/marker; echo \"$x\"", 10*time.Second)
	if !swapped {
		t.Fatal("the hook never ran")
	}
	if strings.Contains(out, "HOST SECRET") {
		t.Fatal("bubblewrap followed a symlink swapped into the image and mounted a host directory")
	}
	if out != "from the image\n" {
		t.Fatalf("want the image's /etc as it was checked, got %q (stderr %q)", out, errs)
	}
	// The next command sees the symlink for what it is: a link inside the
	// sandbox, to a path the sandbox does not have.
	_, out, _ = run(t, sb, "cat /etc/marker 2>/dev/null || echo missing", 10*time.Second)
	if out != "missing\n" {
		t.Fatalf("after the swap: got %q", out)
	}
}

// An image directory another user can change is refused, at create and, if
// it became so afterwards, at every command: its owner (or anyone who may
// write it) could swap what bubblewrap mounts.
func TestImageOthersCanChangeIsRefused(t *testing.T) {
	ctx := context.Background()
	check := func(t *testing.T, change func(rootfs string), want string, wantCreate ...string) {
		t.Helper()
		rootfs := buildRootfs(t)
		d := newImageDriver(t, filepath.Dir(rootfs))
		sb := create(t, d, sandbox.Spec{Image: rootfs})
		change(rootfs)
		_, err := sandbox.NewBackend(d).Create(ctx, sandbox.Spec{Image: rootfs})
		wantC := append(wantCreate, want)[0]
		if !errors.Is(err, sandbox.ErrRefused) || !strings.Contains(err.Error(), wantC) {
			t.Fatalf("create: want a refusal mentioning %q, got %v", wantC, err)
		}
		var out strings.Builder
		_, err = sb.Exec(ctx, "echo ran", sandbox.ExecOptions{Timeout: 10 * time.Second, Stdout: &out, Stderr: io.Discard})
		if err == nil || !strings.Contains(err.Error(), want) || out.Len() > 0 {
			t.Fatalf("exec after the change: want an error mentioning %q and nothing run, got %v, %q", want, err, out.String())
		}
	}
	t.Run("world-writable", func(t *testing.T) {
		check(t, func(r string) { os.Chmod(r, 0o777) }, "writable by group or others")
	})
	t.Run("group-writable entry", func(t *testing.T) {
		check(t, func(r string) { os.Chmod(filepath.Join(r, "etc"), 0o775) }, "writable by group or others")
	})
	t.Run("owned by another user", func(t *testing.T) {
		if needRoot(t) {
			check(t, func(r string) { os.Chown(r, nobody, nobody) }, "belongs to uid 65534")
		}
	})
	t.Run("entry owned by another user", func(t *testing.T) {
		if needRoot(t) {
			check(t, func(r string) { os.Chown(filepath.Join(r, "bin"), nobody, nobody) }, "belongs to uid 65534")
		}
	})
	t.Run("replaced by a symlink", func(t *testing.T) {
		secret := hostSecret(t)
		check(t, func(r string) {
			os.Rename(r, r+".orig")
			os.Symlink(secret, r)
		}, "no longer a directory", "not under the image roots") // create resolves the link
	})
}

// Hole 1, image part: a spec could mount any host directory as the
// sandbox's root (image: /usr, /home, /etc). Image directories must lie
// under operator-configured roots, none by default.
func TestImageDirectoriesNeedAnImageRoot(t *testing.T) {
	ctx := context.Background()
	none := newImageDriver(t)
	_, err := sandbox.NewBackend(none).Create(ctx, sandbox.Spec{Image: "/usr"})
	if !errors.Is(err, sandbox.ErrRefused) || !strings.Contains(err.Error(), "AIRFLOW_GO_WORKER_IMAGE_ROOTS") {
		t.Fatalf("image /usr without image roots: want a refusal saying how to allow image directories, got %v", err)
	}
	if entries, _ := os.ReadDir(none.Root()); len(entries) != 0 {
		t.Fatalf("a refused create left %d entries", len(entries))
	}
	// The default image (the host's userland, read-only) needs no root.
	create(t, none, sandbox.Spec{})

	rootfs := buildRootfs(t)
	d := newImageDriver(t, filepath.Dir(rootfs))
	link := filepath.Join(filepath.Dir(rootfs), "usr-link")
	if err := os.Symlink("/usr", link); err != nil {
		t.Fatal(err)
	}
	for _, img := range []string{"/usr", link, filepath.Dir(rootfs) + "/../../../usr"} {
		_, err := sandbox.NewBackend(d).Create(ctx, sandbox.Spec{Image: img})
		if !errors.Is(err, sandbox.ErrRefused) || !strings.Contains(err.Error(), "not under the image roots") {
			t.Fatalf("image %s outside the image roots: want a refusal, got %v", img, err)
		}
	}
	create(t, d, sandbox.Spec{Image: rootfs})
	if _, err := New(Options{Root: t.TempDir(), ImageRoots: []string{"relative/dir"}}); err == nil {
		t.Fatal("a relative image root was accepted")
	}
}

// Hole 5: with fs.protected_symlinks=0, another user's symlink at the
// default root (in the shared /tmp) made a root worker chmod the link's
// target 0700 and use it. The link must be refused, its target untouched.
func TestRootSymlinkOfAnotherUserIsRefused(t *testing.T) {
	if !needRoot(t) {
		return
	}
	shared := filepath.Join(t.TempDir(), "tmp")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(shared, os.ModeSticky|0o777) // like /tmp
	target := filepath.Join(t.TempDir(), "etc")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(shared, "airflow-go-worker-sandboxes")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	_, err := New(Options{Root: link})
	if err == nil || !strings.Contains(err.Error(), "symlink owned by uid 65534") {
		t.Fatalf("want a refusal of the other user's symlink, got %v", err)
	}
	st, _ := os.Stat(target)
	entries, _ := os.ReadDir(target)
	if st.Mode().Perm() != 0o755 || len(entries) != 0 {
		t.Fatalf("the link's target was changed: mode %v, %d entries", st.Mode().Perm(), len(entries))
	}
}

// A root below a directory others can write (and that is not sticky) is
// refused: they could rename it away and put their own in its place.
func TestRootUnderDirectoryOthersCanWriteIsRefused(t *testing.T) {
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o777)
	_, err := New(Options{Root: filepath.Join(open, "sandboxes")})
	if err == nil || !strings.Contains(err.Error(), "writable by other users") || !strings.Contains(err.Error(), "not sticky") {
		t.Fatalf("want a refusal naming the open parent, got %v", err)
	}
}

// Hole 5, second half: a .system directory another user made in the root
// (possible while roots could be shared) was reused, its passwd followed by
// bubblewrap as root. The generated /etc files never come from disk now: a
// planted passwd leading to a host secret is never read.
func TestPlantedSystemFilesAreNeverRead(t *testing.T) {
	root := t.TempDir()
	secret := hostSecret(t)
	planted := filepath.Join(root, ".system")
	if err := os.Mkdir(planted, 0o755); err != nil {
		t.Fatal(err)
	}
	// The planted passwd leads to a file with exactly the content the
	// worker expects, so the old check found nothing to replace...
	decoy := filepath.Join(t.TempDir(), "decoy")
	want, _ := systemFiles(os.Getuid(), os.Getgid())
	if err := os.WriteFile(decoy, want, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(decoy, filepath.Join(planted, "passwd")); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		os.Lchown(filepath.Join(planted, "passwd"), nobody, nobody)
		os.Chown(planted, nobody, nobody)
	}
	d, err := New(Options{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	// ...and then it is pointed at the host secret.
	os.Remove(decoy)
	if err := os.Symlink(filepath.Join(secret, "marker"), decoy); err != nil {
		t.Fatal(err)
	}
	sb := create(t, d, sandbox.Spec{})
	_, out, _ := run(t, sb, "cat /etc/passwd", 10*time.Second)
	if strings.Contains(out, "HOST SECRET") || out != string(want) {
		t.Fatalf("the sandbox's /etc/passwd is %q, want the generated %q", out, want)
	}
}

// Issue 19, hole 6: with no XDG_STATE_HOME every worker shared one default
// root name in the temporary directory, so another user who made it first
// denied local sandboxes to them all. The default is now the XDG state
// directory under the worker's HOME (issue 38 took the temporary
// directory out of the defaults altogether: statedir_test.go).
func TestDefaultRootIsTheWorkersOwn(t *testing.T) {
	if !needRoot(t) { // only root can make a directory another user's
		return
	}
	tmp := filepath.Join(t.TempDir(), "tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(tmp, os.ModeSticky|0o777) // like /tmp
	t.Setenv("TMPDIR", tmp)
	t.Setenv("XDG_STATE_HOME", "")
	// Another user got there first with the name every worker used.
	squat := filepath.Join(tmp, "airflow-go-worker-sandboxes")
	if err := os.Mkdir(squat, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(squat, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Root: squat}); err == nil {
		t.Fatal("the other user's directory was accepted as a root: the squat would not deny anything")
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	want := filepath.Join(home, ".local", "state", "airflow-go-worker", "sandboxes")
	if got, err := DefaultRoot(); got != want || err != nil {
		t.Fatalf("HOME=%s: default root %s (%v), want %s", home, got, err, want)
	}
	d, err := New(Options{})
	if err != nil {
		t.Fatalf("the squatted shared name still denies local sandboxes: %v", err)
	}
	create(t, d, sandbox.Spec{})
	d.Close()
}
