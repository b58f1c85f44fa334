package local

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/waitwriter"
)

// hostOwner is the host uid and gid of path.
func hostOwner(t *testing.T, path string) ids {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return ids{int(st.Uid), int(st.Gid)}
}

// Issue 38, item 5: a root worker's sandbox processes were root on the
// host too. They run as the sandbox uid now, root inside: what they make
// belongs to it on the host, files the worker staged in are theirs to
// change, what they write can be read back (exports), a second worker
// process (the next task) runs them as the same uid, and they cannot make
// a user namespace of their own.
func TestRootWorkersSandboxRunsAsTheSandboxUID(t *testing.T) {
	if !needRoot(t) {
		return
	}
	root := t.TempDir()
	first := newDriverOn(t, root, "")
	want := ids{DefaultSandboxUID, DefaultSandboxUID}
	if first.sandboxUser != want {
		t.Fatalf("a root worker's sandboxes should run as %v by default, got %v", want, first.sandboxUser)
	}
	sb := create(t, first, sandbox.Spec{})
	if err := sb.WriteFile(t.Context(), "in/staged.txt", strings.NewReader("staged\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `id -u; id -g
echo more >> in/staged.txt && mkdir out && echo made > out/made.txt
if unshare -U true 2>/dev/null; then echo userns; else echo no-userns; fi`
	res, out, errs := run(t, sb, script, time.Minute)
	if res.ExitCode != 0 {
		t.Fatalf("the command failed: exit %d, %q %q", res.ExitCode, out, errs)
	}
	if got := strings.Fields(out); fmt.Sprint(got) != "[0 0 no-userns]" {
		t.Errorf("inside: uid, gid and a nested user namespace: got %v, want root and no namespace", got)
	}
	work, _, err := first.HostDirs(sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"out/made.txt", "out", "in/staged.txt", "in", "."} {
		if got := hostOwner(t, filepath.Join(work, p)); got != want {
			t.Errorf("on the host, %s belongs to %v, want the sandbox's %v", p, got, want)
		}
	}
	if got := hostOwner(t, filepath.Join(root, nameOf(sb.ID()), metaFile)); got.UID != 0 {
		t.Errorf("meta.json belongs to %v; it stays the worker's", got)
	}
	if got := readAll(t, sb, "in/staged.txt"); got != "staged\nmore\n" {
		t.Errorf("the staged file read back as %q, want the sandbox's line appended", got)
	}

	// The next task is another worker process.
	second := newDriverOn(t, root, "")
	again := sandbox.NewBackend(second).Open(sb.ID())
	var buf bytes.Buffer
	res, err = again.Exec(t.Context(), "echo again >> out/made.txt && cat out/made.txt", sandbox.ExecOptions{Timeout: time.Minute, Stdout: &buf})
	if err != nil || res.ExitCode != 0 || buf.String() != "made\nagain\n" {
		t.Errorf("a second worker process: exit %d, %v, %q; want the first one's file, writable", res.ExitCode, err, buf.String())
	}
}

// readAll reads a file of sb as an export would.
func readAll(t *testing.T, sb *sandbox.Sandbox, p string) string {
	t.Helper()
	r, _, err := sb.OpenFile(t.Context(), p, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// inotifyEnv marks the copy of the test binary a sandbox runs to take
// every inotify instance it can.
const inotifyEnv = "LOCAL_TEST_INOTIFY"

// Issue 38, item 5: a sandbox command of a root worker took all 128
// inotify instances of uid 0 while it ran, and root on the host got
// "inotify_init1: Too many open files": the kernel counts them per user,
// and the sandbox was root. Now it takes the sandbox uid's. The test first
// checks that the sandbox did exhaust its own quota (it stopped with
// EMFILE well below its open-file limit), then, while it holds them, makes
// one as root.
func TestSandboxCannotTakeRootsInotifyInstances(t *testing.T) {
	if !needRoot(t) {
		return
	}
	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{})
	copyTestBinary(t, d, sb)
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	out := waitwriter.New("inotify: ")
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(t.Context(), inotifyEnv+"=1 ./local.test -test.run='^TestInotifyHelper$' -test.v", sandbox.ExecOptions{
			Timeout: 2 * time.Minute, Stdin: stdinR, Stdout: out, Stderr: out})
		done <- err
	}()
	select {
	case <-out.Seen():
	case err := <-done:
		t.Fatalf("the helper ended before it reported: %v\n%s", err, out.String())
	}
	line := helperLine(out, "inotify: ")
	var held, nofile int
	var why string
	if _, err := fmt.Sscanf(line, "held %d then %s nofile %d", &held, &why, &nofile); err != nil {
		t.Fatalf("unreadable helper report %q: %v", line, err)
	}
	t.Logf("the sandbox: %s", line)
	if held == 0 || why != "EMFILE" || held+16 > nofile {
		t.Fatalf("the sandbox should have stopped at its per-user quota (EMFILE well below its open-file limit); it held %d, then %s, with %d files allowed", held, why, nofile)
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Errorf("while a sandbox holds %d inotify instances, root on the host cannot make one: %v", held, err)
	} else {
		unix.Close(fd)
	}
	stdinW.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// helperLine is what follows prefix in w's first line holding it.
func helperLine(w *waitwriter.Writer, prefix string) string {
	for _, l := range strings.Split(w.String(), "\n") {
		if _, rest, ok := strings.Cut(l, prefix); ok {
			return rest
		}
	}
	return ""
}

// copyTestBinary puts this test binary into sb's workdir as local.test,
// for helpers that run inside it.
func copyTestBinary(t *testing.T, d *Driver, sb *sandbox.Sandbox) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	work, _, err := d.HostDirs(sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	if err := copyFile(self, filepath.Join(work, "local.test"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestInotifyHelper runs inside a sandbox (inotifyEnv): it makes inotify
// instances until the kernel refuses one, reports, and holds them until
// its stdin ends.
func TestInotifyHelper(t *testing.T) {
	if os.Getenv(inotifyEnv) == "" {
		return
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	held := 0
	var err error
	for held < 1<<16 {
		if _, err = unix.InotifyInit1(unix.IN_CLOEXEC); err != nil {
			break
		}
		held++
	}
	name := fmt.Sprint(err)
	if errno, ok := err.(syscall.Errno); ok && errno == unix.EMFILE {
		name = "EMFILE"
	}
	fmt.Printf("inotify: held %d then %s nofile %d\n", held, strings.ReplaceAll(name, " ", "_"), lim.Cur)
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// The operator's setting: a free uid (and gid), or off; never root, an
// account of the host, or nobody.
func TestSandboxUIDSetting(t *testing.T) {
	for v, want := range map[string]ids{
		"": {DefaultSandboxUID, DefaultSandboxUID}, "1500000000": {1500000000, 1500000000},
		"1500000000:1500000001": {1500000000, 1500000001}, "off": {},
	} {
		t.Setenv(SandboxUIDEnv, v)
		if got, err := sandboxIDsFromEnv(); err != nil || got != want {
			t.Errorf("%s=%q: got %v, %v; want %v", SandboxUIDEnv, v, got, err, want)
		}
	}
	for _, v := range []string{"0", "0:5", "65534", "x", "-1", "4294967296", strconv.Itoa(os.Getuid()), "1"} {
		t.Setenv(SandboxUIDEnv, v)
		if _, err := sandboxIDsFromEnv(); err == nil || !strings.Contains(err.Error(), SandboxUIDEnv) {
			t.Errorf("%s=%q: want it refused, naming the setting; got %v", SandboxUIDEnv, v, err)
		}
	}
}
