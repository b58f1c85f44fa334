package local

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"
	"github.com/airflow-sandbox/airflow-go-worker/testing/waitwriter"
)

// forkHold traces a command's bwrap init from a thread of its own (every
// ptrace call must come from the tracer's thread) and holds it at its
// fork, the moment TestDestroyStopsACommandWhoseInitOutlivesBwrap needs.
type forkHold struct {
	init    int
	initFd  int           // a pidfd of the init
	child   chan int      // the command's host pid, once it runs
	release chan struct{} // closed by let: the init goes on
	let     func()
	done    chan struct{} // closed when the tracer has ended, with err
	err     error
}

// holdAtFork seizes init, which waits on its block fd, and from then on
// holds it stopped where it has forked the command's process and not yet
// asked for bwrap's parent-death signal (do_init's prctl): where, under
// load, the scheduler may hold it while the command starts. The command's
// process is let go.
func holdAtFork(init int) (*forkHold, error) {
	h := &forkHold{init: init, child: make(chan int, 1), release: make(chan struct{}), done: make(chan struct{})}
	h.let = sync.OnceFunc(func() { close(h.release) })
	var err error
	if h.initFd, err = unix.PidfdOpen(init, 0); err != nil {
		return nil, fmt.Errorf("bwrap's init %d: %v", init, err)
	}
	seized := make(chan error, 1)
	go func() {
		defer close(h.done)
		runtime.LockOSThread() // the tracer is this thread: never unlocked, it ends with the goroutine
		if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(init), 0, unix.PTRACE_O_TRACEFORK, 0, 0); e != 0 {
			seized <- fmt.Errorf("cannot trace bwrap's init %d: %v", init, e)
			return
		}
		seized <- nil
		h.err = h.trace()
	}()
	if err := <-seized; err != nil {
		unix.Close(h.initFd)
		return nil, err
	}
	return h, nil
}

// stop kills what the test failed to see stopped, and ends the tracer.
func (h *forkHold) stop() {
	_ = unix.PidfdSendSignal(h.initFd, unix.SIGKILL, nil, 0) // and with it its pid namespace
	h.let()
	<-h.done
	unix.Close(h.initFd)
}

// trace runs on the tracer's thread: it lets the init run to its fork,
// lets the forked command go, and holds the init until release.
func (h *forkHold) trace() error {
	for {
		var ws unix.WaitStatus
		if _, err := unix.Wait4(h.init, &ws, unix.WALL, nil); err != nil {
			return fmt.Errorf("waiting for bwrap's init to fork: %v", err)
		}
		if !ws.Stopped() {
			return fmt.Errorf("bwrap's init ended before it forked the command: %v", ws)
		}
		if ws.TrapCause() == unix.PTRACE_EVENT_FORK {
			break
		}
		sig := 0 // an event stop: nothing to pass on
		if ws.TrapCause() <= 0 && ws.StopSignal() != syscall.SIGTRAP {
			sig = int(ws.StopSignal()) // a signal for the init: deliver it
		}
		if err := unix.PtraceCont(h.init, sig); err != nil {
			return err
		}
	}
	msg, err := unix.PtraceGetEventMsg(h.init)
	if err != nil {
		return err
	}
	child := int(msg)
	var ws unix.WaitStatus
	if _, err := unix.Wait4(child, &ws, unix.WALL, nil); err != nil { // its first stop, traced from birth
		return fmt.Errorf("waiting for the command's process %d: %v", child, err)
	}
	if err := unix.PtraceDetach(child); err != nil {
		return err
	}
	h.child <- child
	<-h.release
	if err := unix.PtraceDetach(h.init); errors.Is(err, unix.ESRCH) {
		// Killed while held: collect its end, which its new parent
		// cannot reap while it is traced.
		_, _ = unix.Wait4(h.init, &ws, unix.WALL, nil)
	} else if err != nil {
		return err
	}
	return nil
}

// Destroy stops every process of a sandbox, whatever the state of
// bubblewrap's own plumbing. bwrap's init (pid 1 of the command's pid
// namespace) leaves the worker's process group (--new-session) and forks
// the command before it asks for its parent-death signal; until then only
// a kill of the init itself ends the namespace. Before, Destroy killed the
// outer bwrap's process group alone, relying on that signal: under load
// (busy loops beside the test) the command had started while its init had
// not yet armed it, about once in 60 runs of
// TestDestroyDuringExecReportsLost, and the sandbox's processes outlived
// Destroy, Close and the one-minute guard on its cgroups. Here the init is
// held at that point for certain.
func TestDestroyStopsACommandWhoseInitOutlivesBwrap(t *testing.T) {
	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{})
	holds := make(chan *forkHold, 1)
	d.confined = func(pid int) {
		h, err := holdAtFork(pid)
		if err != nil {
			t.Error(err)
			return
		}
		holds <- h
	}
	out := waitwriter.New("go")
	done := make(chan sandbox.ExecResult, 1)
	go func() {
		res, _ := sb.Exec(context.Background(), "echo go; exec sleep 1000", sandbox.ExecOptions{Timeout: time.Hour, Stdout: out})
		done <- res
	}()
	h := <-holds
	t.Cleanup(h.stop)
	ctx := deadline.Context(t)
	var child int
	select {
	case child = <-h.child:
	case <-h.done:
		t.Fatalf("the tracer ended before the command started: %v", h.err)
	}
	childFd, err := unix.PidfdOpen(child, 0)
	if err != nil {
		t.Fatalf("the command's process %d: %v", child, err)
	}
	t.Cleanup(func() {
		_ = unix.PidfdSendSignal(childFd, unix.SIGKILL, nil, 0)
		unix.Close(childFd)
	})
	select {
	case <-out.Seen():
	case <-ctx.Done():
		t.Fatal("the command never started")
	}
	// What the check below guards is in place: the init is held before
	// its prctl, the command runs.
	if err := unix.PidfdSendSignal(childFd, 0, nil, 0); err != nil {
		t.Fatalf("the command is not running: %v", err)
	}
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.let() // the init goes on: a signal it asks for now comes too late
	<-h.done
	if h.err != nil {
		t.Fatal(h.err)
	}
	if !exited(ctx, childFd) {
		t.Fatal("the destroyed sandbox's command is still running: its init outlived bwrap and Destroy")
	}
	select {
	case res := <-done:
		if !res.SandboxLost {
			t.Fatalf("want SandboxLost, got %+v", res)
		}
	case <-ctx.Done():
		t.Fatal("exec did not return after destroy")
	}
}

// exited waits for pidfd's process to exit, false if ctx ends first.
func exited(ctx context.Context, pidfd int) bool {
	for ctx.Err() == nil {
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, 100); n > 0 || (err != nil && !errors.Is(err, unix.EINTR)) {
			return n > 0
		}
	}
	return false
}
