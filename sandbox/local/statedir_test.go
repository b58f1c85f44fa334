package local

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// sharedTmp is a directory like /tmp (sticky, writable by all) that
// another user can reach, for TMPDIR.
func sharedTmp(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o755)
	os.Chmod(base, 0o755)
	tmp := filepath.Join(base, "tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(tmp, os.ModeSticky|0o777)
	return tmp
}

// asOtherUser runs a command as uid nobody: the local user attacking.
func asOtherUser(t *testing.T, name string, args ...string) {
	t.Helper()
	c := exec.Command(name, args...)
	c.SysProcAttr = asNobody()
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("as uid %d: %s %v: %v: %s", nobody, name, args, err, out)
	}
}

// systemDirForTest points systemStateDir at a root-owned directory of the
// test's own, as /var/lib is, and returns the sandbox root in it.
func systemDirForTest(t *testing.T) string {
	t.Helper()
	varLib := filepath.Join(t.TempDir(), "var-lib")
	if err := os.Mkdir(varLib, 0o755); err != nil {
		t.Fatal(err)
	}
	old := systemStateDir
	systemStateDir = filepath.Join(varLib, "airflow-go-worker")
	t.Cleanup(func() { systemStateDir = old })
	return filepath.Join(systemStateDir, "sandboxes")
}

// Issue 38, item 8: with HOME unset (or not the worker's own), a root
// worker's sandboxes lived in $TMPDIR/airflow-go-worker-sandboxes-0, which
// any local user can make first, or leave a symlink at, and so deny local
// sandboxes to the worker. Another uid does both here; the root worker
// goes to its own state directory and never touches theirs.
func TestRootWorkerWithoutHomeIgnoresTheTemporaryDirectory(t *testing.T) {
	if !needRoot(t) {
		return
	}
	t.Setenv("XDG_STATE_HOME", "")
	want := systemDirForTest(t)
	nobodysHome := t.TempDir()
	os.Chown(nobodysHome, nobody, nobody)
	for _, attack := range []string{"directory", "symlink"} {
		tmp := sharedTmp(t)
		t.Setenv("TMPDIR", tmp)
		squat := filepath.Join(tmp, "airflow-go-worker-sandboxes-"+strconv.Itoa(os.Geteuid()))
		target := filepath.Join(tmp, "theirs")
		asOtherUser(t, "mkdir", "-m", "0777", target)
		if attack == "directory" {
			asOtherUser(t, "mkdir", "-m", "0700", squat)
		} else {
			asOtherUser(t, "ln", "-s", target, squat)
		}
		for _, home := range []string{"", "/nonexistent", "/", nobodysHome} {
			t.Setenv("HOME", home)
			d, err := New(Options{})
			if err != nil {
				t.Fatalf("%s planted, HOME=%q: the other user denied local sandboxes: %v", attack, home, err)
			}
			if d.Root() != want {
				t.Fatalf("%s planted, HOME=%q: the sandbox root is %s, want the worker's own %s", attack, home, d.Root(), want)
			}
			sb := create(t, d, sandbox.Spec{})
			if res, _, _ := run(t, sb, "true", time.Minute); res.ExitCode != 0 {
				t.Fatalf("a command in the sandbox failed: %d", res.ExitCode)
			}
			sb.Destroy(t.Context())
			d.Close()
		}
		entries, _ := os.ReadDir(target)
		all, _ := os.ReadDir(tmp)
		if len(entries) != 0 || len(all) != 2 {
			t.Fatalf("%s planted: the worker wrote into the temporary directory: %d entries in theirs, %d in it", attack, len(entries), len(all))
		}
	}
	st, err := os.Stat(filepath.Dir(want))
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("the state directory is %v (%v), want mode 0700", st, err)
	}
}

// The root worker's state directory is refused when someone else could
// have chosen or could change it: a symlink (even root's), a directory of
// another uid or one others may write, a file. The refusal names
// XDG_STATE_HOME, and nothing is made where the link leads.
func TestStateDirectoryOthersControlIsRefused(t *testing.T) {
	if !needRoot(t) {
		return
	}
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "")
	systemDirForTest(t)
	elsewhere := filepath.Join(t.TempDir(), "elsewhere")
	os.Mkdir(elsewhere, 0o700)
	for _, c := range []struct {
		plant, want string
	}{
		{"ln -s " + elsewhere + " $D", "is a symlink"},
		{"mkdir $D && chown 65534:65534 $D", "belongs to uid 65534"},
		{"mkdir -m 0777 $D", "other users may write it"},
		{"mkdir -m 0700 $D && ln -s " + elsewhere + " $D/sandboxes", "is a symlink"},
		{"touch $D", "not a directory"},
	} {
		os.RemoveAll(systemStateDir)
		plant := exec.Command("sh", "-c", c.plant)
		plant.Env = append(os.Environ(), "D="+systemStateDir)
		if out, err := plant.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v %s", c.plant, err, out)
		}
		_, err := New(Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "XDG_STATE_HOME") {
			t.Fatalf("%s: want a refusal saying %q and naming XDG_STATE_HOME, got %v", c.plant, c.want, err)
		}
		if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
			t.Fatalf("%s: the worker made %d entries where the link leads", c.plant, len(entries))
		}
	}
}

// An unprivileged worker with no XDG_STATE_HOME and no HOME of its own has
// no state directory: it is refused, naming XDG_STATE_HOME, where it once
// took $TMPDIR/airflow-go-worker-sandboxes-<uid>, a name another user can
// make first.
func TestUnprivilegedWorkerWithoutHomeIsRefused(t *testing.T) {
	if os.Getenv(helperRootEnv) != "" || !needRoot(t) {
		return
	}
	tmp := sharedTmp(t)
	out := runAsNobody(t, "TestUnprivilegedStateDirHelper", []string{stateDirHelperEnv + "=1", "TMPDIR=" + tmp}, "")
	if !strings.Contains(out, "refused: ") || !strings.Contains(out, "XDG_STATE_HOME") {
		t.Fatalf("the unprivileged worker without HOME should be refused, naming XDG_STATE_HOME:\n%s", out)
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Fatalf("the unprivileged worker made %d entries in the temporary directory", len(entries))
	}
}

const stateDirHelperEnv = "LOCAL_TEST_STATE_DIR"

// TestUnprivilegedStateDirHelper is the worker of the test above; run on
// its own it has nothing to do.
func TestUnprivilegedStateDirHelper(t *testing.T) {
	if os.Getenv(helperRootEnv) == "" || os.Getenv(stateDirHelperEnv) == "" {
		return
	}
	d, err := New(Options{})
	if err == nil {
		d.Close()
		fmt.Printf("opened a root at %s\n", d.Root())
		return
	}
	fmt.Printf("refused: %v\n", err)
}
