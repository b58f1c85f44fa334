// Package serverproc runs a test server as a child process on 127.0.0.1:
// its own process group (stopped whole, killed if the test binary dies),
// its output kept for diagnosing a server that does not come up, and a
// readiness probe the caller defines.
//
// The storage emulators (testing/s3server, testing/gcsserver,
// testing/azurite) share it.
package serverproc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"github.com/airflow-sandbox/airflow-go-worker/internal/poll"
	"github.com/airflow-sandbox/airflow-go-worker/testing/syncbuf"
)

// Proc is a running server.
type Proc struct {
	cmd      *exec.Cmd
	exited   chan struct{}
	output   *syncbuf.Buffer
	stopOnce sync.Once
}

// Start runs cmd and polls ready every 20 ms until it returns nil, the
// process exits, or timeout passes (0: no limit). On failure the process is
// stopped and the error carries its output.
func Start(name string, cmd *exec.Cmd, timeout time.Duration, ready func() error) (*Proc, error) {
	within := timeout
	if within <= 0 {
		within = math.MaxInt64
	}
	p := &Proc{cmd: cmd, exited: make(chan struct{}), output: &syncbuf.Buffer{}}
	cmd.Stdout, cmd.Stderr = p.output, p.output
	// Own process group, so the whole server goes away on Stop, and gone
	// with the test binary if it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	var notReady error
	err := poll.Until(context.Background(), within, poll.Every(20*time.Millisecond), func() (bool, error) {
		if notReady = ready(); notReady == nil {
			return true, nil
		}
		select {
		case <-p.exited:
			return false, errExited
		default:
			return false, nil
		}
	})
	switch {
	case err == nil:
		return p, nil
	case errors.Is(err, errExited):
		return nil, fmt.Errorf("%s exited before it served; its output:\n%s", name, p.Output())
	default:
		p.Stop()
		return nil, fmt.Errorf("%s did not answer within %s (last error: %v); its output:\n%s", name, within, notReady, p.Output())
	}
}

var errExited = errors.New("exited")

// Stop terminates the server's process group and waits for it. Safe to
// call more than once.
func (p *Proc) Stop() {
	p.stopOnce.Do(func() {
		if p.cmd.Process == nil {
			return
		}
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
	})
}

// Exited is closed when the process has ended.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Output is what the server printed so far.
func (p *Proc) Output() string { return p.output.String() }

// FreePort returns 127.0.0.1:<port> for a port free at the time of the
// call. Another process can take it before the server binds it, so callers
// retry a start that fails, and their readiness probe must recognise their
// own server (not just any answer on the port).
func FreePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port on 127.0.0.1: %w", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr, nil
}

// Attempts is how often Retry tries a start.
const Attempts = 3

// Retry runs start up to Attempts times and returns its first success or
// its last error: the port FreePort chose can be taken before the server
// binds it, and a few attempts make that race harmless.
func Retry[T any](start func() (T, error)) (T, error) {
	var v T
	var err error
	for attempt := 0; attempt < Attempts; attempt++ {
		if v, err = start(); err == nil {
			return v, nil
		}
	}
	return v, err
}

// Patience is how long a test's server may take to answer: until near the
// test binary's deadline, since a loaded host can miss any fixed limit (a
// benchmark, which has none, waits as long as it takes: 0).
func Patience(tb testing.TB) time.Duration {
	if end := deadline.Of(tb); !end.IsZero() {
		return max(time.Until(end), time.Millisecond)
	}
	return 0
}

// Stopper is a started server.
type Stopper interface{ Stop() }

// StartForTest finds the server's binary (installing it when missing),
// starts it in a fresh directory with Retry, and stops it when tb ends; it
// fails tb, naming the server, when any step fails. start gets how long
// the server may take to answer: Patience(tb).
func StartForTest[S Stopper](tb testing.TB, name string, binary func() (string, error), start func(bin, dir string, within time.Duration) (S, error)) S {
	tb.Helper()
	bin, err := binary()
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	s, err := Retry(func() (S, error) { return start(bin, tb.TempDir(), Patience(tb)) })
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	tb.Cleanup(s.Stop)
	return s
}
