package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// os.Chmod(p, 0o1777) drops the sticky bit in Go (it wants os.ModeSticky):
// the sandbox's /tmp must keep it, inside and on the host.
func TestTmpKeepsStickyBit(t *testing.T) {
	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{})
	_, out, _ := run(t, sb, "stat -c %a /tmp", 10*time.Second)
	if strings.TrimSpace(out) != "1777" {
		t.Fatalf("/tmp in the sandbox has mode %q, want 1777", out)
	}
	st, err := os.Stat(filepath.Join(d.Root(), nameOf(sb.ID()), tmpDir))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSticky == 0 || st.Mode().Perm() != 0o777 {
		t.Fatalf("host directory behind /tmp has mode %v, want sticky 0777", st.Mode())
	}
}

// bubblewrap's root and /dev are tmpfs mounts without a size, outside
// RLIMIT_AS: a sandbox could fill host memory by writing there. / and /dev
// must be read-only and /dev/shm no larger than the memory limit (64 MiB
// without one).
func TestTmpfsWritesAreBoundedByMemoryLimit(t *testing.T) {
	d := newTestDriver(t)
	for _, c := range []struct {
		memMiB, wantMiB int
	}{{48, 48}, {0, defaultShmMiB}} {
		sb := create(t, d, sandbox.Spec{MemoryMiB: c.memMiB})
		res, out, errs := run(t, sb, `for p in /big /dev/big; do touch $p 2>/dev/null && echo "wrote $p"; done
head -c `+strconv.Itoa((c.wantMiB+8)<<20)+` /dev/zero > /dev/shm/big; wc -c < /dev/shm/big; rm /dev/shm/big`, time.Minute)
		if strings.Contains(out, "wrote") {
			t.Fatalf("memory_mib %d: a tmpfs outside the limit is writable: %q", c.memMiB, out)
		}
		lines := strings.Fields(out)
		if res.ExitCode == 137 && c.memMiB > 0 && d.memCgroup.memory != "" {
			// A memory cgroup counts the tmpfs's pages: the limit killed
			// the command before /dev/shm was full. Bounded either way.
			continue
		}
		if len(lines) != 1 {
			t.Fatalf("memory_mib %d: exit %d, out %q, err %q", c.memMiB, res.ExitCode, out, errs)
		}
		n, _ := strconv.Atoi(lines[0])
		if n > c.wantMiB<<20 || n < (c.wantMiB<<20)/2 {
			t.Fatalf("memory_mib %d: /dev/shm took %d bytes, want a tmpfs of %d MiB", c.memMiB, n, c.wantMiB)
		}
	}
}

// forkBomb starts sleeps until fork fails (at most 300, so the test ends
// even with no limit), then counts the sandbox's processes with shell
// builtins alone: no fork is left to spare.
const forkBomb = `( i=0; while [ $i -lt 300 ]; do sleep 30 & i=$((i+1)); done ) 2>/dev/null
n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo "$n"`

// runForkBomb runs forkBomb in a new sandbox of d and returns the count.
func runForkBomb(t *testing.T, d *Driver) int {
	t.Helper()
	sb := create(t, d, sandbox.Spec{})
	res, out, errs := run(t, sb, forkBomb, time.Minute)
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if res.ExitCode != 0 || err != nil {
		t.Fatalf("fork bomb: exit %d, out %q, err %q", res.ExitCode, out, errs)
	}
	t.Logf("the fork bomb reached %d processes", n)
	// The limit is per command: the next one starts afresh.
	if res, out, _ := run(t, sb, "echo after", 10*time.Second); res.ExitCode != 0 || out != "after\n" {
		t.Fatalf("the command after the fork bomb: exit %d, out %q", res.ExitCode, out)
	}
	return n
}

// checkBombCount: the bomb stopped at the limit (not below it, which
// would mean something else failed, and never above it).
func checkBombCount(t *testing.T, n, limit int) {
	t.Helper()
	if n > limit || n < limit/2 {
		t.Fatalf("the fork bomb reached %d processes, want at most the limit %d (and near it)", n, limit)
	}
}

// Hole 9: a fork bomb ran to 3000+ processes on the local backend. Here the
// worker is root (as the tests run in CI), so the limit is a pids cgroup.
func TestForkBombStopsAtProcessLimit(t *testing.T) {
	const limit = 32
	d, err := New(Options{Root: t.TempDir(), MaxProcesses: limit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if d.procs == nil {
		t.Fatalf("this host offers no way to limit processes: %v", d.procsErr)
	}
	t.Logf("process limit enforced with %v", d.procs)
	checkBombCount(t, runForkBomb(t, d), limit)
	d.Close() // waits for the per-command cgroups to go
	if left := cgroupsOf(d); len(left) > 0 {
		t.Fatalf("per-command cgroups left behind: %v", left)
	}
}

// The same bomb under an unprivileged worker, where the limit is
// RLIMIT_NPROC in the sandbox's user namespace. The worker's user already
// runs more processes on the host than the limit: they must not count.
func TestForkBombStopsAtProcessLimitAsUnprivilegedWorker(t *testing.T) {
	if os.Getenv(helperRootEnv) != "" || !needRoot(t) {
		return
	}
	const limit = 32
	for range limit + 8 {
		c := exec.Command("sleep", "60")
		c.SysProcAttr = asNobody()
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	}
	out := runAsNobody(t, "TestUnprivilegedForkBombHelper", nil, "")
	var n int
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "procs="); ok {
			n, _ = strconv.Atoi(v)
		}
	}
	t.Logf("the fork bomb reached %d processes under the unprivileged worker", n)
	checkBombCount(t, n, limit)
}

func asNobody() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
}

// helperRootEnv carries the sandbox root to the unprivileged helper.
const helperRootEnv = "LOCAL_TEST_UNPRIVILEGED_ROOT"

// runAsNobody runs test helper of this package's test binary as an
// unprivileged worker (uid nobody), with a sandbox root of its own in
// helperRootEnv and env added, and returns its output. A setup shell
// command runs first, as root, in a mount namespace of the helper's own
// (with $BASE, a directory for it).
func runAsNobody(t *testing.T, helper string, env []string, setup string) string {
	t.Helper()
	// The test binary and the root, where the other user can reach them.
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o755)
	os.Chmod(base, 0o755)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "local.test")
	if err := copyFile(self, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "sandboxes")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(root, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	args := []string{"-test.run=^" + helper + "$", "-test.count=1", "-test.v"}
	c := exec.Command(bin, args...)
	c.SysProcAttr = asNobody()
	if setup != "" {
		c = exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c",
			setup + ` && exec setpriv --reuid=` + strconv.Itoa(nobody) + ` --regid=` + strconv.Itoa(nobody) + ` --clear-groups -- "$@"`, "sh", bin}, args...)...)
	}
	c.Env = append([]string{"PATH=" + os.Getenv("PATH"), helperRootEnv + "=" + root, "HOME=/nonexistent", "BASE=" + base}, env...)
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("the unprivileged worker failed: %v\n%s", err, out)
	}
	return string(out)
}

// TestUnprivilegedForkBombHelper is the unprivileged worker of the test
// above; run on its own, without helperRootEnv, it has nothing to do.
func TestUnprivilegedForkBombHelper(t *testing.T) {
	root := os.Getenv(helperRootEnv)
	if root == "" {
		return
	}
	d, err := New(Options{Root: root, MaxProcesses: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, ok := d.procs.(rlimitProcs); !ok {
		t.Fatalf("an unprivileged worker should limit with RLIMIT_NPROC, got %v (%v)", d.procs, d.procsErr)
	}
	fmt.Printf("procs=%d\n", runForkBomb(t, d))
}

func copyFile(src, dst string, perm os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, perm)
}

// A root worker with no writable pids cgroup cannot cap processes: specs
// are refused, not run unlimited, unless the operator turns the limit off.
func TestNoProcessLimitAvailableIsRefused(t *testing.T) {
	d := newTestDriver(t)
	d.procs, d.procsErr = nil, errors.New("no pids cgroup is mounted")
	_, err := sandbox.NewBackend(d).Create(context.Background(), sandbox.Spec{})
	if !errors.Is(err, sandbox.ErrRefused) || !strings.Contains(err.Error(), "cannot limit the number of processes") ||
		!strings.Contains(err.Error(), "AIRFLOW_GO_WORKER_LOCAL_MAX_PROCESSES=-1") {
		t.Fatalf("want a refusal saying how to proceed, got %v", err)
	}
	off, err := New(Options{Root: t.TempDir(), MaxProcesses: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	off.procs = nil
	create(t, off, sandbox.Spec{})
}

func TestFindCgroup(t *testing.T) {
	ok := func(string) error { return nil }
	v1 := "8:pids:/docker/abc\n4:memory:/docker/abc\n0::/\n"
	mounts := "39 31 0:36 /docker/abc /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n" +
		"40 31 0:37 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
		"41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
	// The unified hierarchy here offers nothing (no cgroup.subtree_control
	// at that path), so v1's hierarchies are used, under their mount roots.
	parent, version, err := findCgroup("pids", []byte(v1), []byte(mounts), ok)
	if err != nil || parent != "/sys/fs/cgroup/pids" || version != "v1" {
		t.Fatalf("v1 pids: got %s %s, %v", parent, version, err)
	}
	parent, version, err = findCgroup("memory", []byte(v1), []byte(mounts), ok)
	if err != nil || parent != "/sys/fs/cgroup/memory/docker/abc" || version != "v1" {
		t.Fatalf("v1 memory: got %s %s, %v", parent, version, err)
	}
	_, _, err = findCgroup("pids", []byte(v1), []byte(mounts), func(string) error { return syscall.EROFS })
	if err == nil || !strings.Contains(err.Error(), "not writable") {
		t.Fatalf("read-only v1: want an error saying so, got %v", err)
	}
	// cgroup v2 whose subtree offers pids and memory.
	cg := t.TempDir()
	self := filepath.Join(cg, "worker.slice")
	os.Mkdir(self, 0o755)
	os.WriteFile(filepath.Join(self, "cgroup.subtree_control"), []byte("cpu memory pids\n"), 0o644)
	v2mounts := "30 23 0:26 / " + strings.ReplaceAll(cg, " ", `\040`) + " rw - cgroup2 cgroup2 rw\n"
	for _, c := range []string{"pids", "memory"} {
		parent, version, err = findCgroup(c, []byte("0::/worker.slice\n"), []byte(v2mounts), ok)
		if err != nil || parent != self || version != "v2" {
			t.Fatalf("v2 %s: got %s %s, %v", c, parent, version, err)
		}
	}
	os.WriteFile(filepath.Join(self, "cgroup.subtree_control"), []byte("cpu\n"), 0o644)
	if _, _, err := findCgroup("memory", []byte("0::/worker.slice\n"), []byte(v2mounts), ok); err == nil || !strings.Contains(err.Error(), "does not offer the memory controller") {
		t.Fatalf("v2 without memory: want an error saying so, got %v", err)
	}
}

// Issue 19, hole 3: without memory_mib a command allocated and touched
// 3 GiB (a root worker) and 2 GiB (an unprivileged one). Every sandbox now
// has a memory limit, the driver's default unless the spec sets one; here
// the default is lowered so the test touches little. Where the worker can
// make a memory cgroup (a root worker here, as in CI) it bounds the
// command's processes together, so two that each stay under it still
// cannot pass it between them.
func TestDefaultMemoryLimit(t *testing.T) {
	if d := newTestDriver(t); d.limitsOf(&meta{}).MemoryMiB != DefaultMemoryMiB {
		t.Fatalf("a driver's default memory limit is %d MiB, want %d", d.limitsOf(&meta{}).MemoryMiB, DefaultMemoryMiB)
	}
	d, err := New(Options{Root: t.TempDir(), DefaultMemoryMiB: 128})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	sb := create(t, d, sandbox.Spec{})
	touch := func(mib int) string {
		return fmt.Sprintf("python3 -c 'b = b\"a\" * (%d << 20); print(len(b) >> 20)'", mib)
	}
	if res, out, errs := run(t, sb, touch(32), time.Minute); res.ExitCode != 0 || strings.TrimSpace(out) != "32" {
		t.Fatalf("32 MiB under a 128 MiB default: exit %d, %q %q", res.ExitCode, out, errs)
	}
	if res, out, _ := run(t, sb, touch(512), time.Minute); res.ExitCode == 0 {
		t.Fatalf("touching 512 MiB under the 128 MiB default succeeded: %q", out)
	}
	// A spec's memory_mib still sets its own.
	big := create(t, d, sandbox.Spec{MemoryMiB: 1024})
	if res, out, errs := run(t, big, touch(256), time.Minute); res.ExitCode != 0 {
		t.Fatalf("256 MiB under memory_mib 1024: exit %d, %q %q", res.ExitCode, out, errs)
	}
	if d.memCgroup.memory == "" {
		t.Logf("no memory cgroup here (%v): the limit is per process (RLIMIT_AS)", d.memErr)
		return
	}
	two := touch(80) + " & " + touch(80) + " & wait %1; a=$?; wait %2; echo $a $?"
	if _, out, _ := run(t, sb, two, time.Minute); strings.TrimSpace(out) == "0 0" {
		t.Fatalf("two processes of 80 MiB each both ran under a 128 MiB memory cgroup")
	}
}

// The same default under an unprivileged worker, which has no memory
// cgroup here: prlimit's RLIMIT_AS holds each process to it.
func TestDefaultMemoryLimitAsUnprivilegedWorker(t *testing.T) {
	if os.Getenv(helperRootEnv) != "" || !needRoot(t) {
		return
	}
	out := runAsNobody(t, "TestUnprivilegedMemoryHelper", []string{memoryHelperEnv + "=1"}, "")
	t.Logf("%s", out)
	if !strings.Contains(out, "small=0 big=") || strings.Contains(out, "big=0\n") {
		t.Fatalf("under an unprivileged worker, 32 MiB should run and 512 MiB fail under the 128 MiB default:\n%s", out)
	}
}

const memoryHelperEnv = "LOCAL_TEST_MEMORY"

// TestUnprivilegedMemoryHelper is the unprivileged worker of the test
// above; run on its own it has nothing to do.
func TestUnprivilegedMemoryHelper(t *testing.T) {
	root := os.Getenv(helperRootEnv)
	if root == "" || os.Getenv(memoryHelperEnv) == "" {
		return
	}
	d, err := New(Options{Root: root, DefaultMemoryMiB: 128})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	sb := create(t, d, sandbox.Spec{})
	small, _, _ := run(t, sb, "python3 -c 'b = b\"a\" * (32 << 20)'", time.Minute)
	big, _, _ := run(t, sb, "python3 -c 'b = b\"a\" * (512 << 20)'", time.Minute)
	fmt.Printf("memory cgroup %q; small=%d big=%d\n", d.memCgroup.memory, small.ExitCode, big.ExitCode)
}

// Issue 19, hole 3: a command wrote 6 GiB into its workdir. The workdir
// and /tmp together now hold at most the disk limit (lowered here): no
// file grows past it, a command that passes it is stopped, and WriteFile
// refuses what would pass it. A command may still free space.
func TestDiskLimit(t *testing.T) {
	if d := newTestDriver(t); d.limitsOf(&meta{}).DiskMiB != DefaultDiskMiB {
		t.Fatalf("a driver's default disk limit is %d MiB, want %d", d.limitsOf(&meta{}).DiskMiB, DefaultDiskMiB)
	}
	d, err := New(Options{Root: t.TempDir(), DiskMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	sb := create(t, d, sandbox.Spec{})
	ctx := t.Context()
	// One file: RLIMIT_FSIZE stops it at the limit.
	res, _, _ := run(t, sb, "head -c $((100 << 20)) /dev/zero > one.bin; echo $?", time.Minute)
	if st, err := os.Stat(filepath.Join(d.Root(), nameOf(sb.ID()), workDir, "one.bin")); err != nil || st.Size() > 64<<20 || st.Size() < 32<<20 {
		t.Fatalf("one file past the limit: exit %d, %v %v", res.ExitCode, st, err)
	}
	run(t, sb, "rm one.bin", time.Minute)
	// Many files, in the workdir and /tmp, then the command lingers: the
	// watch stops it once they pass the limit.
	_, err = sb.Exec(ctx, `for i in 1 2 3 4 5; do head -c $((10 << 20)) /dev/zero > w$i; head -c $((10 << 20)) /dev/zero > /tmp/t$i; done; sleep 120`, sandbox.ExecOptions{Timeout: 5 * time.Minute})
	if err == nil || !strings.Contains(err.Error(), "over its limit of 64 MiB") || !strings.Contains(err.Error(), "disk_mib") {
		t.Fatalf("want the command stopped with an error naming the limit, got %v", err)
	}
	// WriteFile refuses what would pass it, leaving nothing behind.
	err = sb.WriteFile(ctx, "more.bin", strings.NewReader(strings.Repeat("x", 1<<20)), 0o644)
	if err == nil || !strings.Contains(err.Error(), "disk") {
		t.Fatalf("writing into a full sandbox: %v", err)
	}
	// A command may free space; then writes fit again.
	if res, out, errs := run(t, sb, "rm -f w* /tmp/t*; echo freed", time.Minute); res.ExitCode != 0 || out != "freed\n" {
		t.Fatalf("freeing space: exit %d, %q %q", res.ExitCode, out, errs)
	}
	if err := sb.WriteFile(ctx, "fits.bin", strings.NewReader(strings.Repeat("x", 1<<20)), 0o644); err != nil {
		t.Fatalf("1 MiB into an emptied sandbox: %v", err)
	}
	if err := sb.WriteFile(ctx, "too-big.bin", strings.NewReader(strings.Repeat("x", 70<<20)), 0o644); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Fatalf("70 MiB into a 64 MiB sandbox: %v", err)
	}
	if _, err := os.Stat(filepath.Join(d.Root(), nameOf(sb.ID()), workDir, "too-big.bin")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the refused file was left behind: %v", err)
	}
}

// The bundle config raises the defaults (backends.local or a task's
// backend_options.local); nonsense is refused, naming the options.
func TestBundleOptionsSetTheLimits(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	cfg, err := configure([]byte(`{"default_memory_mib": 4096, "disk_mib": 20480}`))
	if err != nil {
		t.Fatal(err)
	}
	drv, err := cfg.Open(t.Context(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	d := drv.(*Driver)
	if got := d.limitsOf(&meta{}); got.MemoryMiB != 4096 || got.DiskMiB != 20480 {
		t.Fatalf("limits %+v, want 4096 and 20480 MiB", got)
	}
	for _, bad := range []string{`{"disk_mib": -1}`, `{"default_memory_mib": -5}`, `{"disk_mib": 9999999999999}`, `{"disk_mb": 10}`} {
		if _, err := configure([]byte(bad)); err == nil {
			t.Errorf("%s was accepted", bad)
		}
	}
}
