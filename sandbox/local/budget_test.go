package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airflow-sandbox/airflow-go-worker/internal/randhex"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/waitwriter"
)

// smallRoot mounts a tmpfs of sizeMiB as a sandbox root of the test's own:
// filling it fills nothing of the host's.
func smallRoot(t *testing.T, sizeMiB int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%dm,mode=0700", sizeMiB)); err != nil {
		t.Fatalf("cannot mount a %d MiB tmpfs for the sandbox root (the budget tests run as root, as CI does): %v", sizeMiB, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// newDriverAt is a driver on root with opts, closed when the test ends.
func newDriverAt(t *testing.T, root string, opts Options) *Driver {
	t.Helper()
	opts.Root = root
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// rootEntries lists what root holds, but the budget lock and the disk
// templates (disktemplate.go), which stay.
func rootEntries(t *testing.T, root string) []string {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() != budgetLock && !isTemplate(e.Name()) {
			names = append(names, e.Name())
		}
	}
	return names
}

// checkOnly: root holds exactly the sandboxes sbs (nothing half made).
func checkOnly(t *testing.T, root string, sbs ...*sandbox.Sandbox) {
	t.Helper()
	var want []string
	for _, sb := range sbs {
		want = append(want, nameOf(sb.ID()))
	}
	slices.Sort(want)
	if got := rootEntries(t, root); !slices.Equal(got, want) {
		t.Fatalf("the sandbox root holds %v, want only the live sandboxes %v", got, want)
	}
}

// checkBudgetRefusal: err refuses a sandbox past a budget, naming it and
// the setting; final says whether a retry could ever succeed.
func checkBudgetRefusal(t *testing.T, err error, budget, setting string, final bool) {
	t.Helper()
	if err == nil {
		t.Fatalf("a sandbox past the %s was created", budget)
	}
	if !strings.Contains(err.Error(), budget) || !strings.Contains(err.Error(), setting) {
		t.Fatalf("the refusal should name the %s and %s: %v", budget, setting, err)
	}
	if errors.Is(err, sandbox.ErrRefused) != final {
		t.Fatalf("refused for good: %v, want %v: %v", errors.Is(err, sandbox.ErrRefused), final, err)
	}
}

// Issue 38, item 6: three sandboxes of disk_mib 100 on a 250 MiB
// filesystem filled it; one sandbox's ext4 went read-only with lost writes.
// The free space is now the default disk budget: the third is refused
// (nothing made), and each of the two may fill its disk_mib, getting ENOSPC
// at its own limit and nothing worse.
func TestDiskBudgetKeepsSandboxesWithinFreeSpace(t *testing.T) {
	t.Setenv(DiskBudgetEnv, "")
	root := smallRoot(t, 250)
	d := newDriverAt(t, root, Options{DiskMiB: 100})
	if d.mkfs == "" {
		t.Fatalf("this worker cannot mount a sandbox's filesystem (%v): the disk tests run where it can, as root (CI)", d.diskErr)
	}
	live := []*sandbox.Sandbox{create(t, d, sandbox.Spec{}), create(t, d, sandbox.Spec{})}
	_, err := sandbox.NewBackend(d).Create(t.Context(), sandbox.Spec{})
	checkBudgetRefusal(t, err, "disk budget", DiskBudgetEnv, false)
	t.Logf("refused: %v", err)
	checkOnly(t, root, live...)
	for _, sb := range live {
		res, _, errs := run(t, sb, "dd if=/dev/zero of=fill bs=1M count=200", time.Minute)
		checkDiskNote(t, res, errs)
		if strings.Contains(errs, "Input/output error") || strings.Contains(errs, "Read-only") {
			t.Fatalf("filling the sandbox's disk_mib failed its filesystem: %s", errs)
		}
		if res, out, errs := run(t, sb, "rm fill && echo kept > result && cat result", time.Minute); res.ExitCode != 0 || out != "kept\n" {
			t.Fatalf("after filling its disk the sandbox could not write its result: exit %d, %q %q", res.ExitCode, out, errs)
		}
		var st unix.Statfs_t
		if err := unix.Statfs(hostDir(t, d, sb, workDir), &st); err != nil || st.Flags&unix.ST_RDONLY != 0 {
			t.Fatalf("the sandbox's filesystem is read-only now (flags %#x, %v)", st.Flags, err)
		}
	}
}

// The operator's disk budget replaces the free space: the disk images
// (disk_mib plus inode tables) of the live sandboxes add up to at most it;
// a destroyed sandbox stops counting; one bigger than the whole budget is
// refused for good; nonsense is refused when the driver opens.
func TestDiskBudgetSetting(t *testing.T) {
	t.Setenv(DiskBudgetEnv, "250")
	root := t.TempDir()
	d := newDriverAt(t, root, Options{DiskMiB: 100})
	if d.mkfs == "" {
		t.Fatalf("this worker cannot mount a sandbox's filesystem (%v): the disk tests run where it can, as root (CI)", d.diskErr)
	}
	first, second := create(t, d, sandbox.Spec{}), create(t, d, sandbox.Spec{})
	_, err := sandbox.NewBackend(d).Create(t.Context(), sandbox.Spec{})
	checkBudgetRefusal(t, err, "disk budget of 250 MiB", DiskBudgetEnv, false)
	checkOnly(t, root, first, second)
	if err := first.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	create(t, d, sandbox.Spec{})

	t.Setenv(DiskBudgetEnv, "50")
	small := newDriverAt(t, t.TempDir(), Options{DiskMiB: 100})
	_, err = sandbox.NewBackend(small).Create(t.Context(), sandbox.Spec{})
	checkBudgetRefusal(t, err, "disk budget of 50 MiB", DiskBudgetEnv, true)
	for _, bad := range []string{"lots", "-1", "0"} {
		t.Setenv(DiskBudgetEnv, bad)
		if _, err := New(Options{Root: t.TempDir()}); err == nil || !strings.Contains(err.Error(), DiskBudgetEnv) {
			t.Fatalf("%s=%s was accepted: %v", DiskBudgetEnv, bad, err)
		}
	}
}

// Issue 38, item 6: four fork-bombing sandboxes took the host from 163 to
// 3,908 processes, nothing summing their limits. The process limits of the
// live sandboxes now add up to at most the process budget: the fourth of
// 3 x 32 is refused, naming the budget and the setting. Sandboxes
// destroyed or expired, and creates whose worker is gone, stop counting.
func TestProcessBudget(t *testing.T) {
	t.Setenv(ProcessBudgetEnv, "96")
	root := t.TempDir()
	d := newDriverAt(t, root, Options{MaxProcesses: 32})
	b := sandbox.NewBackend(d)
	live := []*sandbox.Sandbox{create(t, d, sandbox.Spec{}), create(t, d, sandbox.Spec{}), create(t, d, sandbox.Spec{})}
	_, err := b.Create(t.Context(), sandbox.Spec{})
	checkBudgetRefusal(t, err, "process budget of 96", ProcessBudgetEnv, false)
	checkOnly(t, root, live...)

	for _, sb := range live[:2] {
		if err := sb.Destroy(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	// One made two hours ago with an hour to live: expired.
	d.now = func() time.Time { return time.Now().Add(-2 * time.Hour) }
	expired, err := d.Create(t.Context(), "expired", sandbox.Spec{Lifetime: time.Hour})
	d.now = time.Now
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Destroy(t.Context(), expired.ID) })
	// A create whose worker died counts no more (and goes); one of a live
	// worker (this one) counts: with the one left, 64 of 96.
	dead := plantReservation(t, root, "dead", deadWorker(t), 32)
	plantReservation(t, root, "alive", thisWorker(), 32)
	create(t, d, sandbox.Spec{})
	_, err = b.Create(t.Context(), sandbox.Spec{})
	checkBudgetRefusal(t, err, "process budget of 96", ProcessBudgetEnv, false)
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatalf("the dead worker's half-made sandbox is still there: %v", err)
	}

	t.Setenv(ProcessBudgetEnv, "16")
	_, err = sandbox.NewBackend(newDriverAt(t, t.TempDir(), Options{MaxProcesses: 32})).Create(t.Context(), sandbox.Spec{})
	checkBudgetRefusal(t, err, "process budget of 16", ProcessBudgetEnv, true)
	t.Setenv(ProcessBudgetEnv, "many")
	if _, err := New(Options{Root: t.TempDir()}); err == nil || !strings.Contains(err.Error(), ProcessBudgetEnv) {
		t.Fatalf("%s=many was accepted: %v", ProcessBudgetEnv, err)
	}
}

// plantReservation makes a half-made sandbox of a create by worker w
// under root, reserving procs processes, and returns its directory.
func plantReservation(t *testing.T, root, name string, w workerID, procs int) string {
	t.Helper()
	dir := filepath.Join(root, ".creating-"+name+"-1")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(reservation{Owner: w.String(), Limits: limits{MaxProcesses: procs}})
	if err := os.WriteFile(filepath.Join(dir, reservationFile), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// deadWorker is the identity of a process that has exited.
func deadWorker(t *testing.T) workerID {
	t.Helper()
	c := exec.Command("sleep", "60")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	start, err := processStart(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	c.Process.Kill()
	c.Wait()
	w := workerID{pid: c.Process.Pid, pidNS: thisWorker().pidNS, start: start}
	if !w.gone() {
		t.Fatalf("process %d was killed and reaped but does not count as gone", w.pid)
	}
	return w
}

// The default process budget is half of what the kernel hands out.
func TestDefaultProcessBudget(t *testing.T) {
	t.Setenv(ProcessBudgetEnv, "")
	pidMax, err1 := readSysctl("kernel/pid_max")
	threadsMax, err2 := readSysctl("kernel/threads-max")
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	want := min(pidMax, threadsMax) / 2
	d := newDriverAt(t, t.TempDir(), Options{MaxProcesses: want/2 + 1})
	if d.budget.procs != want {
		t.Fatalf("the default process budget is %d, want half of min(pid_max %d, threads-max %d)", d.budget.procs, pidMax, threadsMax)
	}
	create(t, d, sandbox.Spec{})
	_, err := sandbox.NewBackend(d).Create(t.Context(), sandbox.Spec{})
	checkBudgetRefusal(t, err, "process budget of "+strconv.Itoa(want)+" (half of kernel.", ProcessBudgetEnv, false)
}

// The sum of the live sandboxes' process limits bounds their processes
// only if each sandbox's commands share its limit: two commands of one
// sandbox each had the whole limit. A command holding 20 processes leaves
// a fork bomb in a second command of its sandbox the rest.
func TestSandboxCommandsShareItsProcessLimit(t *testing.T) {
	const limit = 32
	d := newDriverAt(t, t.TempDir(), Options{MaxProcesses: limit})
	if _, ok := d.procs.(cgroupProcs); !ok {
		t.Fatalf("a root worker should limit processes with a pids cgroup, got %v (%v)", d.procs, d.procsErr)
	}
	sb := create(t, d, sandbox.Spec{})
	hold, release := io.Pipe()
	held := waitwriter.New("\n")
	first := make(chan error, 1)
	go func() {
		_, err := sb.Exec(t.Context(), `i=0; while [ $i -lt 20 ]; do sleep 60 & i=$((i+1)); done
n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo "$n"; read x`, sandbox.ExecOptions{Timeout: time.Minute, Stdin: hold, Stdout: held})
		first <- err
	}()
	select {
	case <-held.Seen():
	case err := <-first:
		t.Fatalf("the first command ended before it held its processes: %v, %q", err, held.String())
	}
	nFirst, err := strconv.Atoi(strings.TrimSpace(held.String()))
	if err != nil || nFirst < 20 {
		t.Fatalf("the first command holds %q processes, want its 20 sleeps and more", held.String())
	}
	_, out, errs := run(t, sb, forkBomb, time.Minute)
	nBomb, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || nBomb < 1 {
		t.Fatalf("the fork bomb's count: %q, %q", out, errs)
	}
	release.Close()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	t.Logf("the first command held %d processes, the fork bomb beside it reached %d", nFirst, nBomb)
	if nFirst+nBomb > limit {
		t.Fatalf("the sandbox's two commands ran %d + %d processes, past its limit of %d", nFirst, nBomb, limit)
	}
}

// budgetHelperEnv carries the sandbox root to TestBudgetCreateHelper.
const budgetHelperEnv = "LOCAL_TEST_BUDGET_ROOT"

// Every task is a process of its own: four workers creating a sandbox at
// the same moment, on a budget of two, make exactly two, and the two
// refused leave nothing behind.
func TestConcurrentCreatesStayWithinTheBudget(t *testing.T) {
	if os.Getenv(budgetHelperEnv) != "" {
		return
	}
	root := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var workers []*exec.Cmd
	var gates []io.Closer
	var outs []*waitwriter.Writer
	for range 4 {
		c := exec.Command(self, "-test.run=^TestBudgetCreateHelper$", "-test.count=1")
		c.Env = append(os.Environ(), budgetHelperEnv+"="+root, ProcessBudgetEnv+"=64")
		gate, err := c.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out := waitwriter.New("ready\n")
		c.Stdout, c.Stderr = out, out
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		workers, gates, outs = append(workers, c), append(gates, gate), append(outs, out)
	}
	for _, out := range outs {
		<-out.Seen()
	}
	for _, gate := range gates { // all at once
		gate.Close()
	}
	created, refused := 0, 0
	for i, c := range workers {
		err := c.Wait()
		out := outs[i].String()
		switch {
		case err != nil:
			t.Fatalf("worker %d failed: %v\n%s", i, err, out)
		case strings.Contains(out, "created "):
			created++
		case strings.Contains(out, "refused: ") && strings.Contains(out, "process budget of 64"):
			refused++
		default:
			t.Fatalf("worker %d said neither created nor refused by the budget:\n%s", i, out)
		}
	}
	d := newDriverAt(t, root, Options{})
	infos, err := d.ListSandboxes(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		t.Cleanup(func() { d.Destroy(t.Context(), info.ID) })
	}
	if created != 2 || refused != 2 || len(infos) != 2 || len(rootEntries(t, root)) != 2 {
		t.Fatalf("on a budget of two sandboxes, %d workers created one and %d were refused; the root holds %v", created, refused, rootEntries(t, root))
	}
}

// TestBudgetCreateHelper is a worker of the test above: it creates one
// sandbox once its stdin closes, and leaves it. Run on its own it does
// nothing.
func TestBudgetCreateHelper(t *testing.T) {
	root := os.Getenv(budgetHelperEnv)
	if root == "" {
		return
	}
	d, err := New(Options{Root: root, MaxProcesses: 32, DiskMiB: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	info, err := d.Create(t.Context(), "budget-"+randhex.String(4), sandbox.Spec{})
	if err != nil {
		fmt.Printf("refused: %v\n", err)
		return
	}
	fmt.Printf("created %s\n", info.ID)
}

// A sandbox's cgroup is removed by the last of its commands to end, while
// another may be starting: the start makes it again. Writing pids.max into
// one being removed failed with ENODEV, which failed the command (seen in
// the OpenSandbox conformance run, two commands of a sandbox back to back).
func TestSandboxCgroupIsMadeAgainWhileItsLastCommandEnds(t *testing.T) {
	d := newTestDriver(t)
	p, ok := d.procs.(cgroupProcs)
	if !ok {
		t.Fatalf("a root worker should limit processes with a pids cgroup, got %v (%v)", d.procs, d.procsErr)
	}
	sb := filepath.Join(p.cg.pids, d.sandboxCgroup("race"))
	t.Cleanup(func() {
		left, _ := filepath.Glob(filepath.Join(sb, "*", "cgroup.procs"))
		for _, l := range left {
			unix.Rmdir(filepath.Dir(l))
		}
		unix.Rmdir(sb)
	})
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			for range 500 {
				dir, err := p.cg.commandCgroup(sb, 32, nil)
				if err != nil {
					errs <- err
					return
				}
				unix.Rmdir(dir)
				unix.Rmdir(sb) // as the last command's release does
			}
			errs <- nil
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
