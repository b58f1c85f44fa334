package local

import (
	"bytes"
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

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

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
	st, err := os.Stat(hostDir(t, d, sb, tmpDir))
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
	// The bomb's processes end with its command: the next one starts afresh.
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
	// An unprivileged worker cannot mount a sandbox's filesystem: its
	// operator turned the disk limit off, unless env says otherwise.
	c.Env = append([]string{"PATH=" + os.Getenv("PATH"), helperRootEnv + "=" + root, "HOME=/nonexistent", "BASE=" + base, DiskLimitEnv + "=off"}, env...)
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

// newDiskDriver is a driver whose sandboxes get diskMiB (and inodes, 0 for
// the default) on a filesystem of their own; a worker that cannot mount
// one fails the test rather than skip it.
func newDiskDriver(t *testing.T, diskMiB, inodes int) *Driver {
	t.Helper()
	d, err := New(Options{Root: t.TempDir(), DiskMiB: diskMiB, DiskInodes: inodes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if d.mkfs == "" {
		t.Fatalf("this worker cannot mount a sandbox's filesystem (%v): the disk tests run where it can, as root (CI)", d.diskErr)
	}
	return d
}

// diskUsed is what sandbox sb's filesystem holds, from the host: bytes of
// its blocks in use and its inodes in use.
func diskUsed(t *testing.T, d *Driver, sb *sandbox.Sandbox) (bytes int64, inodes uint64) {
	bytes, inodes, _ = diskStat(t, d, sb)
	return bytes, inodes
}

// diskStat adds the inodes the filesystem has.
func diskStat(t *testing.T, d *Driver, sb *sandbox.Sandbox) (bytes int64, inodes, total uint64) {
	t.Helper()
	var st syscall.Statfs_t
	mnt := d.mountPoint(filepath.Join(d.Root(), nameOf(sb.ID())))
	if err := syscall.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, st.Files - st.Ffree, st.Files
}

// checkDiskNote: a command that failed on a full disk says which limit
// filled, naming the option that raises it.
func checkDiskNote(t *testing.T, res sandbox.ExecResult, errs string) {
	t.Helper()
	if res.ExitCode == 0 || !strings.Contains(errs, "No space left on device") || !strings.Contains(errs, "disk_mib") {
		t.Fatalf("want the command failed on a full disk, with a note naming disk_mib: exit %d, stderr %q", res.ExitCode, errs)
	}
}

// Issue 19, hole 3: a command wrote 6 GiB into its workdir. The workdir
// and /tmp together now hold at most the disk limit (lowered here), the
// filesystem they live on being that size: a write past it fails with
// ENOSPC, the command's failure names the limit, WriteFile refuses what
// does not fit, and a command may free space again.
func TestDiskLimit(t *testing.T) {
	if d := newTestDriver(t); d.limitsOf(&meta{}).DiskMiB != DefaultDiskMiB || d.diskInodes != DefaultDiskMiB<<20/DefaultBytesPerInode {
		t.Fatalf("a driver's default disk limit is %d MiB and %d inodes, want %d and %d", d.limitsOf(&meta{}).DiskMiB, d.diskInodes, DefaultDiskMiB, DefaultDiskMiB<<20/DefaultBytesPerInode)
	}
	d := newDiskDriver(t, 64, 0)
	sb := create(t, d, sandbox.Spec{})
	ctx := t.Context()
	// Files in the workdir and /tmp, together past the limit.
	res, out, errs := run(t, sb, `for i in 1 2 3 4 5; do head -c $((10 << 20)) /dev/zero > w$i || exit; head -c $((10 << 20)) /dev/zero > /tmp/t$i || exit; done`, time.Minute)
	checkDiskNote(t, res, errs)
	if used, _ := diskUsed(t, d, sb); used < 48<<20 || used > 64<<20 {
		t.Fatalf("the sandbox's filesystem holds %d MiB, want near its 64 MiB limit and not past it (%q)", used>>20, out)
	}
	// WriteFile refuses what does not fit, leaving nothing behind.
	err := sb.WriteFile(ctx, "more.bin", strings.NewReader(strings.Repeat("x", 8<<20)), 0o644)
	if err == nil || !strings.Contains(err.Error(), "does not fit") || !strings.Contains(err.Error(), "disk_mib") {
		t.Fatalf("writing into a full sandbox: %v", err)
	}
	if _, err := os.Stat(filepath.Join(hostDir(t, d, sb, workDir), "more.bin")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the refused file was left behind: %v", err)
	}
	// A command may free space; then writes fit again.
	if res, out, errs := run(t, sb, "rm -f w* /tmp/t*; echo freed", time.Minute); res.ExitCode != 0 || out != "freed\n" {
		t.Fatalf("freeing space: exit %d, %q %q", res.ExitCode, out, errs)
	}
	if err := sb.WriteFile(ctx, "fits.bin", strings.NewReader(strings.Repeat("x", 32<<20)), 0o644); err != nil {
		t.Fatalf("32 MiB into an emptied 64 MiB sandbox: %v", err)
	}
	if err := sb.WriteFile(ctx, "too-big.bin", strings.NewReader(strings.Repeat("x", 70<<20)), 0o644); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Fatalf("70 MiB into a 64 MiB sandbox: %v", err)
	}
	// The host's share: the image is sparse and never larger than the
	// limit and its inode tables.
	st, err := os.Stat(filepath.Join(d.Root(), nameOf(sb.ID()), diskImage))
	if err != nil || st.Size() > 64<<20+int64(d.diskInodes)*inodeSize {
		t.Fatalf("the disk image: %v, %v", st, err)
	}
}

// Issue 29: 25 nested directories of 200-character names put the files
// past the host's PATH_MAX, where the walk could not follow, and held
// 451 MiB under disk_mib 100. The filesystem counts them wherever they are.
func TestDiskLimitHoldsPastPathMax(t *testing.T) {
	d := newDiskDriver(t, 32, 0)
	sb := create(t, d, sandbox.Spec{})
	res, out, errs := run(t, sb, `python3 - <<'EOF'
import errno, os, sys
name, depth = "d" * 200, 0
for _ in range(25):
    os.mkdir(name)
    os.chdir(name)
    depth += 1 + len(name)
print("depth=%d" % depth)
written, i = 0, 0
try:
    while True:
        with open("f%d" % i, "wb", buffering=0) as f:
            for _ in range(4):
                written += f.write(b"x" * (1 << 20))
        i += 1
except OSError as e:
    print("written=%d errno=%s" % (written, errno.errorcode.get(e.errno)))
    sys.exit(1)
EOF`, time.Minute)
	var depth, written int64
	var code string
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, "depth="); ok {
			depth, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := strings.CutPrefix(f, "written="); ok {
			written, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := strings.CutPrefix(f, "errno="); ok {
			code = v
		}
	}
	depth += int64(len(hostDir(t, d, sb, workDir)))
	// The attack ran: files written where the host's path to them is
	// longer than PATH_MAX.
	if depth <= 4096 || written < 16<<20 {
		t.Fatalf("the attack did not run as meant: path %d bytes, %d bytes written (%q %q)", depth, written, out, errs)
	}
	if written > 32<<20 || code != "ENOSPC" {
		t.Fatalf("files past PATH_MAX hold %d MiB under disk_mib 32 (%s)", written>>20, code)
	}
	if res.ExitCode != 1 || !strings.Contains(errs, "disk_mib") {
		b, i, tot := diskStat(t, d, sb)
		t.Fatalf("exit %d, want the script's 1 and a note naming disk_mib: %q (%d %d %d)", res.ExitCode, errs, b, i, tot)
	}
	if used, _ := diskUsed(t, d, sb); used > 32<<20 {
		t.Fatalf("the filesystem holds %d MiB under disk_mib 32", used>>20)
	}
	// The files stay, and so does the limit: the next command still fails
	// to write, and still runs.
	res, out, errs = run(t, sb, `echo running; head -c $((1 << 20)) /dev/zero > more`, time.Minute)
	if out != "running\n" {
		t.Fatalf("the command after: exit %d, %q", res.ExitCode, out)
	}
	checkDiskNote(t, res, errs)
}

// Issue 29: 8 files of 90 MiB, each unlinked while held open, used 720 MiB
// of host disk under disk_mib 100; the walk saw none of them. On the
// sandbox's filesystem their blocks count until the last close.
func TestDiskLimitCountsUnlinkedOpenFiles(t *testing.T) {
	d := newDiskDriver(t, 48, 0)
	sb := create(t, d, sandbox.Spec{})
	res, out, errs := run(t, sb, `python3 - <<'EOF'
import errno, os, sys
files, written = [], 0
try:
    for i in range(8):
        f = open("held%d" % i, "wb", buffering=0)
        os.unlink("held%d" % i)
        files.append(f)
        for _ in range(16):
            written += f.write(b"x" * (1 << 20))
except OSError as e:
    print("written=%d errno=%s" % (written, errno.errorcode.get(e.errno)))
    sys.exit(1)
print("written=%d errno=none" % written)
EOF`, time.Minute)
	var written int64
	var code string
	fmt.Sscanf(strings.TrimSpace(out), "written=%d errno=%s", &written, &code)
	// The attack ran: files written and unlinked while held open.
	if written < 24<<20 {
		t.Fatalf("the attack wrote only %d bytes: %q %q", written, out, errs)
	}
	if code != "ENOSPC" || written > 48<<20 {
		t.Fatalf("unlinked open files took %d MiB under disk_mib 48 (%s); want ENOSPC before the limit", written>>20, code)
	}
	if res.ExitCode != 1 {
		t.Fatalf("exit %d, want the script's 1: %q", res.ExitCode, errs)
	}
}

// Issue 29: an unprivileged worker's walk could not enter a directory a
// command had closed with chmod 000, which hid 360 MiB. Here the worker is
// root (CI): the filesystem counts the closed directory's files. The
// unprivileged worker is below.
func TestDiskLimitCountsClosedDirectories(t *testing.T) {
	d := newDiskDriver(t, 32, 0)
	sb := create(t, d, sandbox.Spec{})
	res, out, errs := run(t, sb, `mkdir hidden && head -c $((24 << 20)) /dev/zero > hidden/f && chmod 000 hidden && echo hid=$(ls -ld hidden | cut -c1-10)
head -c $((24 << 20)) /dev/zero > visible`, time.Minute)
	if !strings.Contains(out, "hid=d---------") {
		t.Fatalf("the attack did not run as meant: %q %q", out, errs)
	}
	checkDiskNote(t, res, errs)
	if used, _ := diskUsed(t, d, sb); used > 32<<20 || used < 24<<20 {
		t.Fatalf("the filesystem holds %d MiB under disk_mib 32, want the hidden 24 MiB and no more than the limit", used>>20)
	}
	// Destroy removes what the closed directory holds, image and all.
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.Root(), nameOf(sb.ID()))); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the destroyed sandbox is still there: %v", err)
	}
}

// Issue 29: 300,000 empty files in 5 s counted as 8 MiB, and nothing
// limited inodes. The sandbox's filesystem has a fixed number of them:
// one per 16 KiB of disk_mib unless disk_inodes says otherwise.
func TestDiskLimitCapsInodes(t *testing.T) {
	for _, c := range []struct{ diskMiB, inodes, want int }{{64, 0, 64 << 20 / DefaultBytesPerInode}, {64, 2000, 2000}} {
		d := newDiskDriver(t, c.diskMiB, c.inodes)
		sb := create(t, d, sandbox.Spec{})
		res, out, errs := run(t, sb, `python3 - <<'EOF'
import errno, sys
n = 0
try:
    while n < 300000:
        open("e%d" % n, "w").close()
        n += 1
except OSError as e:
    print("created=%d errno=%s" % (n, errno.errorcode.get(e.errno)))
    sys.exit(1)
print("created=%d errno=none" % n)
EOF`, 5*time.Minute)
		var n int
		var code string
		fmt.Sscanf(strings.TrimSpace(out), "created=%d errno=%s", &n, &code)
		// The attack ran: files were created, up to the cap and not past it.
		if code != "ENOSPC" || n < c.want/2 || n > c.want+c.want/8 {
			t.Fatalf("disk_inodes %d: created %d empty files (%s), want ENOSPC near %d: %q", c.inodes, n, code, c.want, errs)
		}
		if !strings.Contains(errs, "disk_mib") || res.ExitCode != 1 {
			t.Fatalf("disk_inodes %d: exit %d, want a note naming the limit: %q", c.inodes, res.ExitCode, errs)
		}
		// mkfs.ext4 rounds the count up to fill its last block group.
		if _, inodes, total := diskStat(t, d, sb); inodes > total || total > uint64(c.want+c.want/8) {
			t.Fatalf("disk_inodes %d: %d of %d inodes in use, want at most about %d", c.inodes, inodes, total, c.want)
		}
	}
}

// A worker that cannot mount a sandbox's filesystem refuses specs, saying
// why and what to do, unless the operator turned the limit off; it never
// runs them under a walk.
func TestNoDiskLimitAvailableIsRefused(t *testing.T) {
	d := newTestDriver(t)
	d.mkfs, d.diskErr = "", errors.New("the worker lacks CAP_SYS_ADMIN")
	_, err := sandbox.NewBackend(d).Create(t.Context(), sandbox.Spec{})
	if !errors.Is(err, sandbox.ErrRefused) || !strings.Contains(err.Error(), "disk_mib") || !strings.Contains(err.Error(), "CAP_SYS_ADMIN") ||
		!strings.Contains(err.Error(), DiskLimitEnv+"=off") {
		t.Fatalf("want a refusal naming disk_mib, the reason and the way out, got %v", err)
	}
	t.Setenv(DiskLimitEnv, "sometimes")
	if _, err := New(Options{Root: t.TempDir()}); err == nil || !strings.Contains(err.Error(), DiskLimitEnv) {
		t.Fatalf("a nonsense %s was accepted: %v", DiskLimitEnv, err)
	}
}

// The unprivileged worker of issue 29 (the chmod 000 directory hid 360 MiB
// from its walk) cannot mount a filesystem: it refuses every spec, naming
// disk_mib, until its operator turns the limit off; then sandboxes run, in
// plain directories, and it says so.
func TestDiskLimitAsUnprivilegedWorker(t *testing.T) {
	if os.Getenv(helperRootEnv) != "" || !needRoot(t) {
		return
	}
	out := runAsNobody(t, "TestUnprivilegedDiskHelper", []string{diskHelperEnv + "=1", DiskLimitEnv + "="}, "")
	if !strings.Contains(out, "refused: ") || !strings.Contains(out, "disk_mib") || !strings.Contains(out, "CAP_SYS_ADMIN") {
		t.Fatalf("the unprivileged worker should refuse, naming disk_mib and why:\n%s", out)
	}
	if !strings.Contains(out, "off: ran hidden=d---------") {
		t.Fatalf("with %s=off the unprivileged worker should run the command:\n%s", DiskLimitEnv, out)
	}
}

const diskHelperEnv = "LOCAL_TEST_DISK"

// TestUnprivilegedDiskHelper is the unprivileged worker of the test above;
// run on its own it has nothing to do.
func TestUnprivilegedDiskHelper(t *testing.T) {
	root := os.Getenv(helperRootEnv)
	if root == "" || os.Getenv(diskHelperEnv) == "" {
		return
	}
	d, err := New(Options{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sandbox.NewBackend(d).Create(t.Context(), sandbox.Spec{})
	fmt.Printf("refused: %v\n", err)
	d.Close()
	t.Setenv(DiskLimitEnv, "off")
	if d, err = New(Options{Root: root}); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	sb := create(t, d, sandbox.Spec{})
	_, out, errs := run(t, sb, `mkdir hidden && chmod 000 hidden && echo hidden=$(ls -ld hidden | cut -c1-10)`, time.Minute)
	fmt.Printf("off: ran %s %s\n", strings.TrimSpace(out), errs)
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
	for _, bad := range []string{`{"disk_inodes": -1}`, `{"disk_mib": -1}`, `{"default_memory_mib": -5}`, `{"disk_mib": 9999999999999}`, `{"disk_mb": 10}`} {
		if _, err := configure([]byte(bad)); err == nil {
			t.Errorf("%s was accepted", bad)
		}
	}
}

// hostDir is the host directory behind sandbox sb's workdir (workDir) or
// /tmp (tmpDir).
func hostDir(t *testing.T, d *Driver, sb *sandbox.Sandbox, area string) string {
	t.Helper()
	work, tmp, err := d.HostDirs(sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	if area == tmpDir {
		return tmp
	}
	return work
}

// The task that creates a sandbox and the task that uses it next are two
// worker processes, each mounting the sandbox's filesystem. The loop device
// once kept the file the first worker locked, and with it the lock, so the
// second worker's first command waited forever (CI: every handoff Dag's
// collect hung until cancelled).
func TestSecondWorkerUsesAMountedSandbox(t *testing.T) {
	root := t.TempDir()
	first, err := New(Options{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if first.mkfs == "" {
		t.Fatalf("this worker cannot mount a sandbox's filesystem (%v): the disk tests run where it can, as root (CI)", first.diskErr)
	}
	sb := create(t, first, sandbox.Spec{})
	if _, out, _ := run(t, sb, "echo one > mine; cat mine", time.Minute); out != "one\n" {
		t.Fatalf("the first worker's command printed %q", out)
	}
	if ok, err := first.isMounted(filepath.Join(root, nameOf(sb.ID()))); !ok || err != nil {
		t.Fatalf("the first worker has the sandbox's filesystem mounted: %v, %v", ok, err)
	}
	second, err := New(Options{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	done := make(chan string, 1)
	go func() {
		var out bytes.Buffer
		_, err := sandbox.NewBackend(second).Open(sb.ID()).Exec(t.Context(), "cat mine", sandbox.ExecOptions{Timeout: time.Minute, Stdout: &out})
		done <- fmt.Sprint(out.String(), err)
	}()
	select {
	case got := <-done:
		if got != "one\n<nil>" {
			t.Fatalf("the second worker read %q, want the first worker's file", got)
		}
	case <-deadline.Context(t).Done():
		t.Fatal("the second worker's command never started: it waits on the first worker's mount")
	}
}
