package local

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/internal/randhex"
	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/eventually"
)

func newTestDriver(t *testing.T) *Driver {
	t.Helper()
	d, err := New(Options{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Close()
		if left := cgroupsOf(d); len(left) > 0 {
			t.Errorf("the driver's per-command cgroups outlived Close: %v", left)
		}
	})
	return d
}

// nameOf is the sandbox's directory name: its id without "@host".
func nameOf(id string) string {
	name, _, _ := strings.Cut(id, "@")
	return name
}

func create(t *testing.T, d *Driver, spec sandbox.Spec) *sandbox.Sandbox {
	t.Helper()
	sb, err := sandbox.NewBackend(d).Create(context.Background(), spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { sb.Destroy(context.Background()) })
	return sb
}

func run(t *testing.T, sb *sandbox.Sandbox, cmd string, timeout time.Duration) (sandbox.ExecResult, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	res, err := sb.Exec(context.Background(), cmd, sandbox.ExecOptions{Timeout: timeout, Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	return res, out.String(), errb.String()
}

func TestMissingBwrapSaysHowToInstall(t *testing.T) {
	_, err := New(Options{Root: t.TempDir(), Bwrap: "/nonexistent/bwrap"})
	if err == nil || !strings.Contains(err.Error(), "apt-get install bubblewrap") {
		t.Fatalf("want an error telling how to install bubblewrap, got %v", err)
	}
}

func TestRefusals(t *testing.T) {
	// Every directory may be an image here, so the checks behind the image
	// roots are reached.
	d, err := New(Options{Root: t.TempDir(), ImageRoots: []string{"/"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ctx := context.Background()
	other := create(t, d, sandbox.Spec{Env: map[string]string{"SECRET": "theirs"}})
	cases := []struct {
		name string
		spec sandbox.Spec
		want string
	}{
		// CIDR allowlists are enforced (egress_test.go); names are not.
		{"host allowlist", sandbox.Spec{Network: sandbox.NetworkPolicy{AllowHosts: []string{"pypi.org"}}}, "list the hosts' addresses in allow_cidrs"},
		{"cpu", sandbox.Spec{CPU: 2}, "cannot limit cpu"},
		{"registry image", sandbox.Spec{Image: "python:3.12-slim"}, "cannot pull"},
		{"image not a dir", sandbox.Spec{Image: "/nonexistent/rootfs"}, "not a directory"},
		{"workdir in /usr", sandbox.Spec{Workdir: "/usr/local/work"}, "read-only system directory /usr"},
		{"host root as image", sandbox.Spec{Image: "/"}, "the host itself"},
		{"image holding the sandboxes", sandbox.Spec{Image: filepath.Dir(d.Root())}, "contains the sandboxes' directory"},
		{"another sandbox as image", sandbox.Spec{Image: filepath.Join(d.Root(), nameOf(other.ID()))}, "inside the sandboxes' directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := sandbox.NewBackend(d).Create(ctx, c.spec)
			if !errors.Is(err, sandbox.ErrRefused) || !sandbox.IsFinal(err) {
				t.Fatalf("want a terminal ErrRefused, got %v", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not mention %q", err, c.want)
			}
			for _, e := range rootEntries(t, d.Root()) {
				if e != nameOf(other.ID()) {
					t.Fatalf("refused create left %s behind", e)
				}
			}
		})
	}
}

func TestIgnoreImageAndCPURunOnHost(t *testing.T) {
	d, err := New(Options{Root: t.TempDir(), IgnoreImage: true, IgnoreCPU: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	sb := create(t, d, sandbox.Spec{Image: "python:3.12-slim", CPU: 2})
	res, out, _ := run(t, sb, "echo ran", time.Minute)
	if res.ExitCode != 0 || out != "ran\n" {
		t.Fatalf("exit %d, out %q", res.ExitCode, out)
	}
}

func TestMemoryLimitIsEnforced(t *testing.T) {
	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{MemoryMiB: 64})
	// The shell holds the 200 MB command substitution in memory.
	res, _, _ := run(t, sb, `x=$(head -c 200000000 /dev/zero | tr '\0' a); echo ${#x}`, time.Minute)
	if res.ExitCode == 0 {
		t.Fatal("allocating 200 MB under a 64 MiB limit succeeded")
	}
	res, out, _ := run(t, sb, `x=$(head -c 1000000 /dev/zero | tr '\0' a); echo ${#x}`, time.Minute)
	if res.ExitCode != 0 || strings.TrimSpace(out) != "1000000" {
		t.Fatalf("1 MB under a 64 MiB limit: exit %d, out %q", res.ExitCode, out)
	}
}

func TestTimeoutKillsBackgroundChildren(t *testing.T) {
	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{})
	// A copy of sleep under a unique name, so the host can look for it by
	// process name (bwrap's own argv also holds the name, its comm does not).
	name := "bg" + randhex.String(4)
	type result struct {
		res sandbox.ExecResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := sb.Exec(context.Background(), "cp /bin/sleep ./"+name+" && ./"+name+" 100 & sleep 100", sandbox.ExecOptions{Timeout: 3 * time.Second})
		done <- result{res, err}
	}()
	running := func() bool { return processNamed(name) }
	eventually.True(t, "the background child to start", running)
	r := <-done
	if r.err != nil || !r.res.TimedOut {
		t.Fatalf("want TimedOut, got %+v, %v", r.res, r.err)
	}
	eventually.True(t, "the background child to end with the timed-out command", func() bool { return !running() })
	if _, err := sb.Stat(context.Background(), name); err != nil {
		t.Fatalf("files written before the timeout were lost: %v", err)
	}
}

// processNamed reports whether any host process has comm name (no pgrep:
// procps may be missing in CI images).
func processNamed(name string) bool {
	comms, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, c := range comms {
		if b, err := os.ReadFile(c); err == nil && strings.TrimSpace(string(b)) == name {
			return true
		}
	}
	return false
}

func TestDestroyDuringExecReportsLost(t *testing.T) {
	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{})
	done := make(chan sandbox.ExecResult, 1)
	started := make(chan struct{})
	go func() {
		res, _ := sb.Exec(context.Background(), "echo go; sleep 100", sandbox.ExecOptions{Timeout: time.Minute,
			Stdout: writerFunc(func(p []byte) {
				select {
				case <-started:
				default:
					close(started)
				}
			})})
		done <- res
	}()
	<-started
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		if !res.SandboxLost {
			t.Fatalf("want SandboxLost, got %+v", res)
		}
	case <-deadline.Context(t).Done():
		t.Fatal("exec did not return after destroy")
	}
}

type writerFunc func([]byte)

func (w writerFunc) Write(p []byte) (int, error) { w(p); return len(p), nil }

func TestExpiredSandboxIsGoneAndSweepable(t *testing.T) {
	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{Lifetime: time.Hour})
	d.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	_, err := d.Exec(context.Background(), sb.ID(), sandbox.ExecRequest{Command: "true", Timeout: time.Minute, Stdout: io.Discard, Stderr: io.Discard})
	if !errors.Is(err, sandbox.ErrGone) || !sandbox.IsFinal(err) {
		t.Fatalf("exec on an expired sandbox: want terminal ErrGone, got %v", err)
	}
	list, err := d.ListSandboxes(context.Background(), map[string]string{sandbox.TagSandbox: nameOf(sb.ID())})
	if err != nil || len(list) != 1 {
		t.Fatalf("expired sandbox not listed: %v %v", list, err)
	}
	removed, err := d.RemoveExpired(context.Background())
	if err != nil || len(removed) != 1 || removed[0] != sb.ID() {
		t.Fatalf("RemoveExpired = %v, %v", removed, err)
	}
	if _, err := os.Stat(filepath.Join(d.Root(), nameOf(sb.ID()))); !os.IsNotExist(err) {
		t.Fatalf("expired sandbox dir still there: %v", err)
	}
}

func TestRemoveExpiredClearsCrashLeftovers(t *testing.T) {
	d := newTestDriver(t)
	for _, name := range []string{".trash-airflow-sandbox-1", ".creating-airflow-sandbox-2-x", ".creating-airflow-sandbox-3-y"} {
		// A read-only subdirectory, as a command might leave.
		if err := os.MkdirAll(filepath.Join(d.Root(), name, diskMounts, "worker", workDir, "ro"), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(d.Root(), name, diskMounts, "worker", workDir, "ro"), 0o500)
	}
	old := time.Now().Add(-2 * time.Hour)
	os.Chtimes(filepath.Join(d.Root(), ".creating-airflow-sandbox-2-x"), old, old)
	if _, err := d.RemoveExpired(context.Background()); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{".trash-airflow-sandbox-1": false, ".creating-airflow-sandbox-2-x": false, ".creating-airflow-sandbox-3-y": true} {
		_, err := os.Stat(filepath.Join(d.Root(), name))
		if exists := err == nil; exists != want {
			t.Errorf("%s: exists=%v, want %v (a create in progress must be left alone)", name, exists, want)
		}
	}
}

func TestSymlinkOutOfSandboxNeverReadsHostFile(t *testing.T) {
	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{})
	secret := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(secret, []byte("HOST SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, sb, "ln -s "+secret+" link; ln -s ../../../../../../.."+secret+" rel", time.Minute)
	for _, p := range []string{"link", "rel"} {
		rc, _, err := sb.OpenFile(context.Background(), p, 1<<20)
		if err == nil {
			b, _ := io.ReadAll(rc)
			rc.Close()
			if strings.Contains(string(b), "HOST SECRET") {
				t.Fatalf("%s: read the host's file through a symlink", p)
			}
			continue
		}
		if !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("%s: want ErrNotFound (the target does not exist in the sandbox), got %v", p, err)
		}
	}
	// Writing through the symlink replaces the link, never the host file.
	if err := sb.WriteFile(context.Background(), "link", strings.NewReader("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(secret); string(b) != "HOST SECRET" {
		t.Fatalf("host file changed to %q", b)
	}
	// A symlink to a system file shows the sandbox's view of it.
	run(t, sb, "ln -sf /etc/passwd pw", time.Minute)
	rc, _, err := sb.OpenFile(context.Background(), "pw", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	host, _ := os.ReadFile("/etc/passwd")
	if bytes.Equal(b, host) || !strings.HasPrefix(string(b), "root:x:0:0:") {
		t.Fatalf("pw: want the sandbox's generated /etc/passwd, got %q", b)
	}
}

func TestSystemPathsReadInsideSandbox(t *testing.T) {
	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{})
	ctx := context.Background()
	fi, err := sb.Stat(ctx, "/usr/bin")
	if err != nil || !fi.IsDir() {
		t.Fatalf("stat /usr/bin: %+v %v", fi, err)
	}
	list, err := sb.List(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]sandbox.FileInfo{}
	for _, e := range list {
		names[e.Name] = e
	}
	if !names["usr"].IsDir() || !names["workspace"].IsDir() {
		t.Fatalf("listing / misses usr or workspace: %+v", list)
	}
	for _, leak := range []string{"root", "work", "home"} {
		if _, ok := names[leak]; ok {
			t.Fatalf("host directory /%s is visible in the sandbox", leak)
		}
	}
	rc, size, err := sb.OpenFile(ctx, "/etc/group", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if int64(len(b)) != size || !strings.HasPrefix(string(b), "root:x:0:") {
		t.Fatalf("/etc/group: size %d, got %q", size, b)
	}
	if _, _, err := sb.OpenFile(ctx, "/etc/shadow", 1<<20); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("/etc/shadow: want ErrNotFound, got %v", err)
	}
	if err := sb.WriteFile(ctx, "/usr/x", strings.NewReader("x"), 0); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("writing /usr/x: want a read-only error, got %v", err)
	}
}

func TestTmpPersistsAcrossCommands(t *testing.T) {
	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{})
	run(t, sb, "echo kept > /tmp/x", time.Minute)
	_, out, _ := run(t, sb, "cat /tmp/x", time.Minute)
	if out != "kept\n" {
		t.Fatalf("/tmp did not persist: %q", out)
	}
}

func TestEnvIsOnlyTheSpecs(t *testing.T) {
	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{Env: map[string]string{"GREETING": "hi there"}, Workdir: "/home/job"})
	_, out, _ := run(t, sb, "env | sort", time.Minute)
	var keys []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, _, _ := strings.Cut(line, "=")
		keys = append(keys, k)
	}
	// sh itself adds PWD (and dash nothing else).
	want := "GREETING HOME LANG PATH PWD"
	if got := strings.Join(keys, " "); got != want {
		t.Fatalf("env keys = %q, want %q\n%s", got, want, out)
	}
	if !strings.Contains(out, "HOME=/home/job\n") || !strings.Contains(out, "GREETING=hi there\n") {
		t.Fatalf("env:\n%s", out)
	}
}

// buildRootfs makes a tiny root filesystem in a directory of its own: the
// host's sh and the libraries it needs, and /etc/marker.
func buildRootfs(t *testing.T) string {
	t.Helper()
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	out, err := exec.Command("ldd", "/bin/sh").Output()
	if err != nil {
		t.Fatalf("ldd /bin/sh: %v", err)
	}
	files := []string{"/bin/sh"}
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, "/") {
			files = append(files, f)
		}
	}
	for _, f := range files {
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(real)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(rootfs, f)
		os.MkdirAll(filepath.Dir(dst), 0o755)
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755)
	os.WriteFile(filepath.Join(rootfs, "etc", "marker"), []byte("from the image"), 0o644)
	return rootfs
}

// TestRootfsImage checks a sandbox on an image directory sees the image,
// not the host.
func TestRootfsImage(t *testing.T) {
	rootfs := buildRootfs(t)
	d, err := New(Options{Root: t.TempDir(), ImageRoots: []string{filepath.Dir(rootfs)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	sb := create(t, d, sandbox.Spec{Image: rootfs})
	res, out2, errs := run(t, sb, `read x < /etc/marker; echo "$x"; if [ -e /usr/bin ]; then echo host-leak; fi; echo data > f`, time.Minute)
	if res.ExitCode != 0 || out2 != "from the image\n" {
		t.Fatalf("exit %d, out %q, err %q", res.ExitCode, out2, errs)
	}
	rc, _, err := sb.OpenFile(context.Background(), "/workspace/f", 100)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "data\n" {
		t.Fatalf("got %q", b)
	}
}

func TestOpenNetworkReachesHost(t *testing.T) {
	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{Network: sandbox.NetworkPolicy{Open: true}})
	res, out, _ := run(t, sb, "test -r /etc/resolv.conf && echo has-resolv", time.Minute)
	if _, err := os.Stat("/etc/resolv.conf"); err == nil && (res.ExitCode != 0 || out != "has-resolv\n") {
		t.Fatalf("open network sandbox lacks the host's resolv.conf: exit %d", res.ExitCode)
	}
}

func TestWorkdirAndTmpRoots(t *testing.T) {
	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{})
	ctx := context.Background()
	for _, p := range []string{"/workspace", ".", "/tmp"} {
		fi, err := sb.Stat(ctx, p)
		if err != nil || !fi.IsDir() {
			t.Errorf("stat %s: %+v, %v", p, fi, err)
		}
		if _, err := sb.List(ctx, p); err != nil {
			t.Errorf("list %s: %v", p, err)
		}
		if _, _, err := sb.OpenFile(ctx, p, 10); !errors.Is(err, sandbox.ErrIsDir) {
			t.Errorf("open %s: want ErrIsDir, got %v", p, err)
		}
	}
	if err := sb.WriteFile(ctx, "/workspace", strings.NewReader("x"), 0); err == nil {
		t.Error("writing over the workdir itself succeeded")
	}
	run(t, sb, "echo x > afile", time.Minute)
	err := sb.WriteFile(ctx, "afile/below", strings.NewReader("x"), 0)
	if err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("writing below a file: want a not-a-directory error, got %v", err)
	}
	if err := sb.WriteFile(ctx, "dir/", strings.NewReader("x"), 0); err != nil {
		t.Fatal(err) // "dir/" cleans to "dir": a file
	}
	if err := sb.WriteFile(ctx, "adir/f", strings.NewReader("x"), 0); err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile(ctx, "adir", strings.NewReader("x"), 0); !errors.Is(err, sandbox.ErrIsDir) {
		t.Errorf("writing over a directory: want ErrIsDir, got %v", err)
	}
}

func TestConcurrentExecs(t *testing.T) {
	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{})
	ctx := context.Background()
	errs := make(chan error, 4)
	for i := range 4 {
		go func() {
			res, err := sb.Exec(ctx, "echo "+strconv.Itoa(i)+" > f"+strconv.Itoa(i), sandbox.ExecOptions{Timeout: time.Minute})
			if err == nil && res.ExitCode != 0 {
				err = errors.New("exit " + strconv.Itoa(res.ExitCode))
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	list, err := sb.List(ctx, ".")
	if err != nil || len(list) != 4 {
		t.Fatalf("list after concurrent writes: %v, %v", list, err)
	}
}

// TestSpecEnvNeverReachesHostProcesses: bwrap and prlimit run on the host,
// unsandboxed; a spec's LD_PRELOAD must reach only the sandboxed command.
func TestSpecEnvNeverReachesHostProcesses(t *testing.T) {
	hostOnly := filepath.Join(t.TempDir(), "not-a-library.so")
	if err := os.WriteFile(hostOnly, []byte("not ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{MemoryMiB: 512, Env: map[string]string{"LD_PRELOAD": hostOnly}})
	res, out, errs := run(t, sb, `echo "$LD_PRELOAD"`, time.Minute)
	if res.ExitCode != 0 || out != hostOnly+"\n" {
		t.Fatalf("exit %d out %q err %q", res.ExitCode, out, errs)
	}
	// Inside, the file does not exist ("cannot open"); had a host process
	// loaded it, ld.so would have found it and said "invalid ELF header".
	if strings.Contains(errs, "invalid ELF header") || strings.Contains(errs, "file too short") {
		t.Fatalf("a host process loaded the spec's LD_PRELOAD: %s", errs)
	}
	if !strings.Contains(errs, "cannot open shared object file") {
		t.Fatalf("the sandboxed shell did not see LD_PRELOAD as expected: %q", errs)
	}
}

func TestDestroyRemovesUnwritableDirs(t *testing.T) {
	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{})
	run(t, sb, "mkdir -p locked/inner && touch locked/inner/f && chmod 0500 locked/inner && chmod 0 locked", time.Minute)
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, e := range rootEntries(t, d.Root()) {
		t.Errorf("left behind: %s", e)
	}
}

// Every host file the sandbox sees under /etc must be one any host user may
// read: the sandbox user can be the worker's own uid (root in containers),
// so a restricted file mounted in (such as /etc/ssl/private's TLS keys)
// would be readable inside.
func TestHostEtcMountsHoldOnlyWorldReadableFiles(t *testing.T) {
	for _, name := range append(append([]string{}, hostEtc...), hostEtcNetwork...) {
		src := filepath.Join("/etc", name)
		filepath.WalkDir(src, func(p string, e os.DirEntry, err error) error {
			if err != nil || e.Type()&os.ModeSymlink != 0 {
				return nil // missing on this host, or resolved inside the sandbox
			}
			st, err := e.Info()
			if err != nil {
				return nil
			}
			need := os.FileMode(0o004)
			if st.IsDir() {
				need = 0o005
			}
			if st.Mode().Perm()&need != need {
				t.Errorf("%s (mode %v) is mounted into every sandbox but is not world-readable; mount only the public part of /etc/%s", p, st.Mode(), name)
			}
			return nil
		})
	}
}

func TestHostTLSPrivateKeysAreHidden(t *testing.T) {
	if _, err := os.Stat("/etc/ssl/certs"); err != nil {
		t.Fatalf("this test needs the host's CA certificates (apt-get install ca-certificates): %v", err)
	}
	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{})
	_, out, _ := run(t, sb, "test -e /etc/ssl/private && echo private; test -d /etc/ssl/certs && echo certs", 10*time.Second)
	if out != "certs\n" {
		t.Fatalf("want the CA certificates visible and /etc/ssl/private hidden, got %q", out)
	}
}

// A root others can write is refused, and left as it is: the directory may
// not be the worker's to change (the old chmod 0700 reached /tmp itself
// through a planted symlink).
func TestRootOthersCanWriteIsRefusedUnchanged(t *testing.T) {
	root := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(root, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(root, 0o777) // past the umask
	_, err := New(Options{Root: root})
	if err == nil || !strings.Contains(err.Error(), "writable by other users") {
		t.Fatalf("want a refusal of the world-writable root, got %v", err)
	}
	if st, _ := os.Stat(root); st.Mode().Perm() != 0o777 {
		t.Fatalf("the refused root's mode changed to %v", st.Mode().Perm())
	}
}

func TestRootOwnedByAnotherUserIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Log("not root: cannot give a directory to another user here; covered where tests run as root (CI)")
		return
	}
	root := filepath.Join(t.TempDir(), "theirs")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(root, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := New(Options{Root: root})
	if err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Fatalf("want a refusal naming the other owner, got %v", err)
	}
}

func TestRootSymlinkIsResolvedOnce(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{Root: link})
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if d.Root() != real {
		t.Fatalf("root %q: want the resolved %q, so re-pointing the link later cannot move the sandboxes", d.Root(), real)
	}
}

// A NUL in the environment must never reach bwrap's NUL-separated
// argument stream, where the rest of the value would become bwrap options
// (here: the host's root mounted read-write in the sandbox).
func TestExecEnvCannotInjectBwrapOptions(t *testing.T) {
	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{})
	var out bytes.Buffer
	req := sandbox.ExecRequest{
		Command: "ls /hostroot && echo escaped", Timeout: 10 * time.Second,
		Env:    map[string]string{"X": "y\x00--bind\x00/\x00/hostroot"},
		Stdout: &out, Stderr: io.Discard,
	}
	// Straight to the driver: the portable layer's check must not be the
	// only wall.
	res, err := d.Exec(context.Background(), sb.ID(), req)
	if err == nil || strings.Contains(out.String(), "escaped") {
		t.Fatalf("a NUL in an env value was run (%+v, %q); it must be refused", res, out.String())
	}
	if !strings.Contains(err.Error(), "NUL") {
		t.Errorf("the error should say what is wrong: %v", err)
	}
	req.Env = map[string]string{"A\x00--bind\x00/\x00/hostroot\x00--setenv\x00B": "v"}
	if _, err := d.Exec(context.Background(), sb.ID(), req); err == nil || strings.Contains(out.String(), "escaped") {
		t.Fatalf("a NUL in an env name was run: %v %q", err, out.String())
	}
}

// Sysctl writes are checked against uid 0 alone, so with a root worker a
// writable /proc/sys in the sandbox is the host's kernel settings. The test
// never writes: it checks the mount is read-only and that access(2) agrees.
func TestProcSysIsReadOnly(t *testing.T) {
	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{})
	_, out, _ := run(t, sb, `awk '$2 == "/proc/sys" { split($4, o, ","); print o[1] }' /proc/mounts; `+
		`[ -w /proc/sys/kernel/core_pattern ] && echo writable; cat /proc/sys/kernel/ostype`, 10*time.Second)
	if out != "ro\nLinux\n" {
		t.Fatalf("want /proc/sys mounted read-only and still readable, got %q", out)
	}
}
