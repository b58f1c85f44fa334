package local

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// cgroupsOf lists the per-command cgroups driver d has now, in every
// hierarchy it uses, and the cgroups of its sandboxes (which their last
// command removes): another driver's (one an earlier test never closed)
// are not its business.
func cgroupsOf(d *Driver) []string {
	var left []string
	for _, p := range d.cgroupParents() {
		for _, pattern := range []string{d.cgroupPrefix + "*", "*/" + d.cgroupPrefix + "*", d.sandboxCgroup("*")} {
			l, _ := filepath.Glob(filepath.Join(p, pattern))
			left = append(left, l...)
		}
	}
	return left
}

// Close kills commands still running, so a worker shutting down with a
// command in flight is the expected case: Close waited on the clean-ups'
// WaitGroup while the commands it had killed were still adding theirs to
// it, which panicked ("WaitGroup is reused before previous Wait has
// returned") or returned before their cgroups were gone. Close now returns
// once every command it killed has returned and cleaned up, and a command
// asked for after it is refused.
func TestCloseDuringCommands(t *testing.T) {
	d, err := New(Options{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	sb := create(t, d, sandbox.Spec{})
	const n = 6
	var started, returned sync.WaitGroup
	var done atomic.Int32
	started.Add(n)
	returned.Add(n)
	for range n {
		go func() {
			defer returned.Done()
			var once sync.Once
			sb.Exec(context.Background(), "echo go; exec sleep 100", sandbox.ExecOptions{Timeout: time.Minute,
				Stdout: writerFunc(func([]byte) { once.Do(started.Done) })})
			done.Add(1)
		}()
	}
	started.Wait() // every command runs
	// A task's shutdown and its signal handler may both close it.
	var closers sync.WaitGroup
	for range 3 {
		closers.Go(func() { d.Close() })
	}
	closers.Wait()
	if got := done.Load(); got != n {
		t.Errorf("Close returned while %d of the %d commands it killed were still returning", n-got, n)
	}
	if left := cgroupsOf(d); len(left) > 0 {
		t.Errorf("Close returned before the commands' cgroups were removed: %v", left)
	}
	returned.Wait()
	_, err = sb.Exec(context.Background(), "echo late", sandbox.ExecOptions{Timeout: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("a command after Close: want a refusal saying the driver is closed, got %v", err)
	}
	if errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("a closed driver must not report the sandbox gone: %v", err)
	}
	d.Close() // twice is harmless
}

// A command whose limits were set only in part (its pids cgroup made, its
// memory cgroup in another hierarchy refused) is killed; the pids cgroup,
// which held bwrap's init while it waited to start the command, must go
// too. It was removed while the init was still in it, and removal gave up
// after two seconds of EBUSY: a cgroup left on the host. Now every
// cgroup is removed once the init has exited, and with it, as its pid
// namespace ended, every process of the command.
func TestPartlyLimitedCommandLeavesNoCgroup(t *testing.T) {
	if !needRoot(t) { // the pids cgroup is a root worker's process limit
		return
	}
	d, err := New(Options{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	procs, ok := d.procs.(cgroupProcs)
	if !ok {
		t.Fatalf("a root worker should limit processes with a pids cgroup here, got %v (%v)", d.procs, d.procsErr)
	}
	// Memory in the other cgroup version, under a parent that is missing:
	// its cgroup is refused after the pids cgroup was made (applyLimits
	// makes that one first).
	other := map[string]string{"v1": "v2", "v2": "v1"}[procs.cg.version]
	d.memCgroup = cgroupLimiter{version: other, memory: filepath.Join(t.TempDir(), "missing"), prefix: d.cgroupPrefix}
	sb := create(t, d, sandbox.Spec{})
	_, err = sb.Exec(context.Background(), "echo never", sandbox.ExecOptions{Timeout: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "cannot create a cgroup under "+d.memCgroup.memory) {
		t.Fatalf("want the command refused for its memory cgroup, got %v", err)
	}
	d.Close()
	if left := cgroupsOf(d); len(left) > 0 {
		t.Fatalf("the pids cgroup of a command refused its memory cgroup was left behind: %v", left)
	}
}
