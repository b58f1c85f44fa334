package startup_test

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// peakRSS runs bin with args and returns its peak resident set size in
// bytes, read from /proc/<pid>/status (VmHWM) at the moment it exits.
//
// The child's own rusage cannot tell: os/exec forks with CLONE_VM, and on
// exec Linux folds the high-water mark of the memory it leaves (the
// parent's) into the child's ru_maxrss, so every child of a 30 MB test
// binary "peaks" at 30 MB at least. Under ptrace with PTRACE_O_TRACEEXIT the
// child stops just before its memory is released, and VmHWM is its own.
func peakRSS(bin string, args ...string) (int64, error) {
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	// Every ptrace request must come from the thread that started the
	// tracee.
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		n, err := tracePeak(bin, args)
		done <- result{n, err}
	}()
	r := <-done
	return r.n, r.err
}

func tracePeak(bin string, args []string) (int64, error) {
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return 0, err
	}
	defer devnull.Close()
	pid, err := syscall.ForkExec(bin, append([]string{bin}, args...), &syscall.ProcAttr{
		Env:   []string{},
		Files: []uintptr{devnull.Fd(), devnull.Fd(), devnull.Fd()},
		Sys:   &syscall.SysProcAttr{Ptrace: true},
	})
	if err != nil {
		return 0, err
	}
	var ws syscall.WaitStatus
	// The tracee stops with SIGTRAP after exec.
	if _, err := syscall.Wait4(pid, &ws, syscall.WALL, nil); err != nil {
		return 0, err
	}
	if err := syscall.PtraceSetOptions(pid, syscall.PTRACE_O_TRACEEXIT); err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		return 0, fmt.Errorf("ptrace: %w", err)
	}
	var peak int64 = -1
	sig := 0
	for {
		if err := syscall.PtraceCont(pid, sig); err != nil {
			return 0, fmt.Errorf("ptrace cont: %w", err)
		}
		if _, err := syscall.Wait4(pid, &ws, syscall.WALL, nil); err != nil {
			return 0, err
		}
		switch {
		case ws.Exited() || ws.Signaled():
			if peak < 0 {
				return 0, fmt.Errorf("%s exited without an exit stop", bin)
			}
			if ws.ExitStatus() != 0 {
				return 0, fmt.Errorf("%s exited with status %d", bin, ws.ExitStatus())
			}
			return peak, nil
		case ws.Stopped() && ws.StopSignal() == syscall.SIGTRAP && ws.TrapCause() == syscall.PTRACE_EVENT_EXIT:
			if peak, err = vmHWM(pid); err != nil {
				syscall.Kill(pid, syscall.SIGKILL)
				return 0, err
			}
			sig = 0
		case ws.Stopped() && ws.StopSignal() == syscall.SIGTRAP:
			sig = 0
		case ws.Stopped():
			// Pass the child's own signals on (the Go runtime preempts
			// with SIGURG).
			sig = int(ws.StopSignal())
		}
	}
}

// vmHWM reads the peak resident set size of a live process.
func vmHWM(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmHWM", pid)
}
