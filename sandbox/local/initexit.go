package local

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// initExit watches bubblewrap's init, the process that becomes pid 1 of a
// command's pid namespace, so the command's cgroups are removed only once
// it has exited: the kernel ends every other process of the namespace
// before the exit of its init completes, so by then no process of the
// command is left in them. When bwrap is killed (a timeout, Destroy,
// Close) its init dies a moment after it, and its pipes could close before
// the last of the command's processes had left their cgroups.
//
// It is also how the command is killed for certain: its init leaves the
// worker's process group (--new-session) before it asks for bubblewrap's
// parent-death signal, so a kill of bwrap's process group misses it, and
// a bwrap killed in between leaves it and the command running (kill).
type initExit struct {
	mu sync.Mutex // held while fd is used, so that it is never closed then
	fd int        // a pidfd of the init; -1: closed, or this kernel has none (before 5.3)
}

// initExitGuard bounds the wait for an init that has been told to end: only
// a process stuck in the kernel outlasts it, and then its cgroups are left
// to a later worker (removeLeftoverCgroups).
const initExitGuard = time.Minute

// watchInit opens a pidfd of bubblewrap's init, host process pid, which
// waits on its block fd meanwhile; parent is bwrap's outer process. It
// checks that pid still is bwrap's child, so the pidfd (and every limit
// set through pid) cannot reach a process that took a reused pid.
func watchInit(pid, parent int) (*initExit, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ENOSYS) {
		return &initExit{fd: -1}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the sandbox ended while its limits were set (pid %d: %v)", pid, err)
	}
	if ppid, err := parentOf(pid); err != nil || ppid != parent {
		unix.Close(fd)
		return nil, fmt.Errorf("the sandbox ended while its limits were set (pid %d is no longer bubblewrap's)", pid)
	}
	return &initExit{fd: fd}, nil
}

// kill kills the init, and with it every process of its pid namespace,
// whatever uid they run as; an init that has exited is left alone (the
// pidfd names it alone, never a process that took its pid).
func (w *initExit) kill() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd >= 0 {
		_ = unix.PidfdSendSignal(w.fd, unix.SIGKILL, nil, 0) // fails only once it has exited
	}
}

// wait returns true once the init has exited, false if it has not within
// guard; then it closes the pidfd.
func (w *initExit) wait(guard time.Duration) bool {
	if w.fd < 0 {
		return true // nothing to wait with: removal may fail, and says so
	}
	defer w.close()
	deadline := time.Now().Add(guard)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		switch {
		case errors.Is(err, unix.EINTR):
		case err != nil:
			return true // cannot wait: removal may fail, and says so
		case n > 0:
			return true // readable: the init has exited
		}
	}
}

func (w *initExit) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	unix.Close(w.fd)
	w.fd = -1
}

// parentOf reads the parent pid of process pid from /proc/<pid>/stat.
func parentOf(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b)[i+1:])
	if i < 0 || len(f) < 2 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, b)
	}
	return strconv.Atoi(f[1])
}
