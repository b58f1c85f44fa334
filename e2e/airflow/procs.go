package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// proc is a long-running process the driver started in its own process
// group, its output in a log file. Stopping it signals the whole group, so
// what it forked (LocalExecutor workers, forked bundles) goes too.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // set before done closes
}

func startProc(name, logPath string, env []string, argv ...string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, log: logPath, done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = f, f
	// Own group to signal as a whole; Pdeathsig so a driver killed with
	// SIGKILL does not leave Airflow running either.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// exited says whether the process ended, and how.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the group, waits up to grace, then SIGKILLs the
// group; the group is killed even when its leader exited on its own, for
// children left behind.
func (p *proc) stop(grace time.Duration) {
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		fmt.Fprintf(os.Stderr, "    %s did not stop within %s after SIGTERM; killing it\n", p.name, grace)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.done
}

// tail is the end of the process's log, for error messages.
func (p *proc) tail(lines int) string { return tailFile(p.log, lines) }

func tailFile(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return "      | " + strings.Join(all, "\n      | ")
}

// runBounded runs a command to completion within timeout, in its own
// process group (killed whole on timeout or cancellation), output to a log.
func runBounded(ctx context.Context, timeout time.Duration, name, logPath string, env []string, argv ...string) error {
	p, err := startProc(name, logPath, env, argv...)
	if err != nil {
		return err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		p.stop(5 * time.Second)
		return fmt.Errorf("%s did not finish within %s; the end of its log (%s):\n%s", name, timeout, logPath, p.tail(30))
	case <-ctx.Done():
		p.stop(5 * time.Second)
		return ctx.Err()
	}
	if p.err != nil {
		var ee *exec.ExitError
		if errors.As(p.err, &ee) {
			return fmt.Errorf("%s failed (%v); the end of its log (%s):\n%s", name, p.err, logPath, p.tail(30))
		}
		return fmt.Errorf("%s: %w", name, p.err)
	}
	return nil
}
