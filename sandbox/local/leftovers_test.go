package local

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/eventually"
	"github.com/airflow-sandbox/airflow-go-worker/testing/waitwriter"
)

// held is what a worker holds on the host for its sandboxes: the mounts
// of their filesystems and its per-command cgroups.
type held struct{ mounts, cgroups []string }

// heldBy lists what the worker whose names begin with prefix holds under
// root and in the cgroup parents.
func heldBy(root, prefix string, parents []string) held {
	var h held
	for _, m := range mountsUnder(root) {
		if strings.HasPrefix(filepath.Base(m)+"-", prefix) { // a mount name has no trailing -
			h.mounts = append(h.mounts, m)
		}
	}
	for _, p := range parents {
		for _, pattern := range []string{prefix + "*", "*/" + prefix + "*"} {
			l, _ := filepath.Glob(filepath.Join(p, pattern))
			h.cgroups = append(h.cgroups, l...)
		}
	}
	return h
}

// loopBacking lists the files the host's loop devices are attached to.
func loopBacking() []string {
	names, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var files []string
	for _, n := range names {
		if raw, err := os.ReadFile(n); err == nil {
			files = append(files, strings.TrimSpace(string(raw)))
		}
	}
	return files
}

// cgroupsEmpty reports whether no process is left in the cgroups.
func cgroupsEmpty(cgroups []string) bool {
	for _, cg := range cgroups {
		if raw, err := os.ReadFile(filepath.Join(cg, "cgroup.procs")); err == nil && len(strings.TrimSpace(string(raw))) > 0 {
			return false
		}
	}
	return true
}

const killedHelperEnv = "LOCAL_TEST_KILLED_ROOT"

// Issue 38, item 7: kill -9 of a worker mid-command left its sandbox's
// loop device, its mount and two cgroups until the sandbox was destroyed.
// The next worker to open the root removes them, while a live worker's
// mount, cgroups and running command on the same root stay untouched.
func TestKilledWorkersLeftoversAreRemoved(t *testing.T) {
	if os.Getenv(killedHelperEnv) != "" {
		return
	}
	root := t.TempDir()
	live := newDriverAt(t, root, Options{DiskMiB: 16})
	if live.mkfs == "" {
		t.Fatalf("this worker cannot mount a sandbox's filesystem (%v): the disk tests run where it can, as root (CI)", live.diskErr)
	}
	parents := live.cgroupParents()
	if len(parents) == 0 {
		t.Fatalf("this worker makes no cgroups (%v, %v): the test runs where it does, as root (CI)", live.procsErr, live.memErr)
	}
	// This process is the live worker, a command running.
	hold, release := io.Pipe()
	defer release.Close()
	started := waitwriter.New("started")
	liveDone := make(chan error, 1)
	liveSb := create(t, live, sandbox.Spec{})
	go func() {
		_, err := liveSb.Exec(t.Context(), "echo started; read x", sandbox.ExecOptions{Timeout: 5 * time.Minute, Stdin: hold, Stdout: started})
		liveDone <- err
	}()
	<-started.Seen()
	liveHeld := heldBy(root, live.cgroupPrefix, parents)
	if len(liveHeld.mounts) != 1 || len(liveHeld.cgroups) == 0 {
		t.Fatalf("the live worker's command should hold a mount and cgroups: %+v", liveHeld)
	}

	victim, image := startAndKillWorker(t, root, parents)
	next := newDriverAt(t, root, Options{}) // the next worker
	if h := heldBy(root, victim, parents); len(h.mounts)+len(h.cgroups) > 0 {
		t.Fatalf("the killed worker's leftovers are still there after the next worker opened the root: %+v", h)
	}
	shared := next.sandboxCgroup(filepath.Base(filepath.Dir(image)))
	for _, p := range parents {
		if _, err := os.Stat(filepath.Join(p, shared)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the killed worker's sandbox keeps its cgroup %s: %v", shared, err)
		}
	}
	eventually.True(t, "the killed worker's loop device to be freed", func() bool {
		return !slices.Contains(loopBacking(), image)
	})
	if h := heldBy(root, live.cgroupPrefix, parents); !slices.Equal(h.mounts, liveHeld.mounts) || !slices.Equal(h.cgroups, liveHeld.cgroups) {
		t.Fatalf("the live worker's mount and cgroups were touched: %+v, were %+v", h, liveHeld)
	}
	select {
	case err := <-liveDone:
		t.Fatalf("the live worker's command ended: %v", err)
	default:
	}
	release.Close()
	if err := <-liveDone; err != nil {
		t.Fatalf("the live worker's command: %v", err)
	}
}

// startAndKillWorker starts a worker process on root that runs a command
// in a sandbox of its own, checks that it holds a mount and cgroups, kills
// it with SIGKILL and waits for its command's processes to be gone. It
// returns the prefix of the dead worker's names and its sandbox's image.
func startAndKillWorker(t *testing.T, root string, parents []string) (prefix, image string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command(self, "-test.run=^TestKilledWorkerHelper$", "-test.count=1")
	c.Env = append(os.Environ(), killedHelperEnv+"="+root)
	out := waitwriter.New("started")
	c.Stdout, c.Stderr = out, out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	prefix = cgroupPrefix + strconv.Itoa(c.Process.Pid) + "-"
	t.Cleanup(func() { // what the test failed to see removed
		c.Process.Kill()
		h := heldBy(root, prefix, parents)
		for _, m := range h.mounts {
			unmount(m)
		}
		for _, cg := range h.cgroups {
			os.Remove(cg)
			if strings.HasPrefix(filepath.Base(filepath.Dir(cg)), sandboxCgroupPrefix) {
				os.Remove(filepath.Dir(cg)) // once no other command of the sandbox runs
			}
		}
	})
	select {
	case <-out.Seen():
	case err := <-exited:
		t.Fatalf("the worker ended before its command started: %v\n%s", err, out.String())
	}
	h := heldBy(root, prefix, parents)
	if len(h.mounts) != 1 || len(h.cgroups) < len(parents) {
		t.Fatalf("the worker's command should hold a mount and a cgroup in each of %v: %+v", parents, h)
	}
	image = filepath.Join(filepath.Dir(filepath.Dir(h.mounts[0])), diskImage)
	if !slices.Contains(loopBacking(), image) {
		t.Fatalf("no loop device is attached to the worker's sandbox image %s: %v", image, loopBacking())
	}
	c.Process.Kill()
	if err := <-exited; err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("the worker was not killed: %v", err)
	}
	// Its command dies with it (bubblewrap's parent-death signal); a
	// cgroup can be removed once its processes are gone.
	eventually.True(t, "the killed worker's command to end", func() bool { return cgroupsEmpty(h.cgroups) })
	if h := heldBy(root, prefix, parents); len(h.mounts) != 1 || len(h.cgroups) < len(parents) {
		t.Fatalf("killing the worker should have left its mount and cgroups: %+v", h)
	}
	return prefix, image
}

// TestKilledWorkerHelper is the worker killed above: it runs a command
// that never ends in a sandbox of its own. Run on its own it does nothing.
func TestKilledWorkerHelper(t *testing.T) {
	root := os.Getenv(killedHelperEnv)
	if root == "" {
		return
	}
	d, err := New(Options{Root: root, DiskMiB: 16})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.NewBackend(d).Create(t.Context(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sb.Exec(t.Context(), "echo started; exec sleep 600", sandbox.ExecOptions{Timeout: time.Hour, Stdout: os.Stdout})
	t.Fatalf("the command that never ends ended: %v", err)
}

// A leftover is removed only when its worker is gone: no process has its
// pid, or the process that has it started at another time (the pid was
// reused). A live worker's is kept, and so is one of another pid
// namespace, whose pids cannot be looked up here.
func TestLeftoverOfAReusedPidGoesAndALiveWorkersStays(t *testing.T) {
	d := newTestDriver(t)
	parents := d.cgroupParents()
	if len(parents) == 0 {
		t.Fatalf("this worker makes no cgroups (%v, %v): the test runs where it does, as root (CI)", d.procsErr, d.memErr)
	}
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	start, err := processStart(sleeper.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	ns := thisWorker().pidNS
	dead := deadWorker(t)
	cases := []struct {
		w    workerID
		gone bool
	}{
		{workerID{pid: sleeper.Process.Pid, pidNS: ns, start: start}, false},    // alive
		{workerID{pid: sleeper.Process.Pid, pidNS: ns, start: start + 1}, true}, // its pid reused
		{dead, true}, // exited
		{workerID{pid: dead.pid, pidNS: ns + 1, start: dead.start}, false}, // another pid namespace
		{thisWorker(), false},
	}
	for _, c := range cases {
		if c.w.gone() != c.gone {
			t.Fatalf("worker %s: gone is %v, want %v", c.w, c.w.gone(), c.gone)
		}
		if w, ok := workerOf(cgroupPrefix + c.w.String() + "-0a1b2c3d-xyz"); !ok || w != c.w {
			t.Fatalf("the name of worker %s reads as %v, %v", c.w, w, ok)
		}
	}
	var dirs []string
	for i, c := range cases {
		dir := filepath.Join(parents[0], cgroupPrefix+c.w.String()+"-0a1b2c3d-"+strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(dir) })
		dirs = append(dirs, dir)
	}
	// The dead worker's cgroups of this root and of another: a worker
	// clears only its own root's (another root's workers, say another test
	// process, clear theirs), and names from before the root tag any.
	ours := filepath.Join(parents[0], cgroupPrefix+dead.String()+"-"+rootTag(d.root)+"-0a1b2c3d-x")
	theirs := filepath.Join(parents[0], cgroupPrefix+dead.String()+"-"+rootTag(d.root+"/elsewhere")+"-0a1b2c3d-x")
	for _, dir := range []string{ours, theirs} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(dir) })
	}
	removeLeftoverCgroups(parents[0], d.root, time.Now())
	for i, c := range cases {
		_, err := os.Stat(dirs[i])
		if gone := errors.Is(err, os.ErrNotExist); gone != c.gone {
			t.Fatalf("the cgroup of worker %s: removed %v, want %v", c.w, gone, c.gone)
		}
	}
	if _, err := os.Stat(ours); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the dead worker's cgroup of this root was kept: %v", err)
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Fatalf("the dead worker's cgroup of another root was removed: %v", err)
	}
}
