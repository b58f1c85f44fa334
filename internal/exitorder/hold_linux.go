//go:build linux && (amd64 || arm64)

package exitorder

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pollFd is struct pollfd.
type pollFd struct {
	fd     int32
	events int16
	_      int16 // revents: the holder only waits, it reads nothing back
}

// parentExit is what the holder polls: it shares this process's memory
// but must not touch the Go stack or heap, so it is a global set before
// the clone.
var parentExit pollFd

// cloneHolder is clone(CLONE_VM|SIGCHLD) whose child only polls fds and
// exits (holder_linux_*.s).
//
//go:noescape
func cloneHolder(flags uintptr, fds *pollFd) (pid, errno uintptr)

// Hold starts the holder and returns its pid. Call it once, right before
// the process exits: the holder keeps open whatever the process closes
// after it.
func Hold() (int, error) {
	pidfd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		// ENOSYS (Linux before 5.3) is errors.ErrUnsupported.
		return 0, fmt.Errorf("starting the exit holder: %w", os.NewSyscallError("pidfd_open", err))
	}
	defer unix.Close(pidfd)
	parentExit = pollFd{fd: int32(pidfd), events: unix.POLLIN}
	// The holder inherits this thread's signal mask, and must block
	// everything: a handler would run the Go runtime's code on this
	// thread's memory. SIGKILL still ends it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	all, old := ^uint64(0), uint64(0)
	if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&all)), uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 {
		return 0, fmt.Errorf("starting the exit holder: %w", os.NewSyscallError("rt_sigprocmask", e))
	}
	pid, e := cloneHolder(unix.CLONE_VM|uintptr(unix.SIGCHLD), &parentExit)
	// Restoring the mask the call above read cannot fail.
	_, _, _ = syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&old)), 0, 8, 0, 0)
	if e != 0 {
		return 0, fmt.Errorf("starting the exit holder: %w", os.NewSyscallError("clone", syscall.Errno(e)))
	}
	return int(pid), nil
}
