package check

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultTimeout is how long check runs at most unless told otherwise
// (--timeout).
const DefaultTimeout = 5 * time.Minute

// maxParserOutput is how much of what the parser prints (dagfacts.py and
// the Dag files it imports) check keeps: only the end is shown, when
// parsing fails, and a Dag file may print without end.
const maxParserOutput = 64 << 10

// TimeoutError is a check that ran out of time (Options.Timeout).
type TimeoutError struct {
	Timeout time.Duration
	// Doing says what was still running.
	Doing string
}

func (e *TimeoutError) Error() string {
	doing := ""
	if e.Doing != "" {
		doing = " (" + e.Doing + ")"
	}
	return fmt.Sprintf("the check did not finish within --timeout %s%s: a Dag file may block while Airflow imports it (reading input, waiting on the network); fix it, or give the check more time with --timeout (0: no limit)", e.Timeout, doing)
}

// timedOut returns ctx's TimeoutError, saying what was running, or nil
// when ctx did not run out of time.
func timedOut(ctx context.Context, doing string) error {
	if te, ok := context.Cause(ctx).(*TimeoutError); ok {
		return &TimeoutError{Timeout: te.Timeout, Doing: doing}
	}
	return nil
}

// tailWriter keeps the last max bytes written to it and counts the rest.
type tailWriter struct {
	mu      sync.Mutex
	max     int
	buf     []byte
	dropped int64
}

func newTailWriter(max int) *tailWriter { return &tailWriter{max: max} }

// Write never fails. The buffer holds at most twice max: it is cut back
// to max only then, so many small writes cost constant time per byte.
func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	if len(p) >= w.max {
		w.dropped += int64(len(w.buf) + len(p) - w.max)
		w.buf, p = w.buf[:0], p[len(p)-w.max:]
	}
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - w.max; len(w.buf) >= 2*w.max {
		w.buf = w.buf[:copy(w.buf, w.buf[over:])]
		w.dropped += int64(over)
	}
	return n, nil
}

// String is what is kept, the last max bytes.
func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf[max(0, len(w.buf)-w.max):])
}

// lastLines is the last n lines kept, after a line saying how much output
// came before them, if any did.
func (w *tailWriter) lastLines(n int) string {
	w.mu.Lock()
	cut := max(0, len(w.buf)-w.max)
	all, dropped := string(w.buf[cut:]), w.dropped+int64(cut)
	w.mu.Unlock()
	shown := tail(all, n)
	if before := dropped + int64(len(strings.TrimRight(all, "\n"))-len(shown)); before > 0 {
		return fmt.Sprintf("[%d bytes of output before these lines not shown]\n%s", before, shown)
	}
	return shown
}

// bound makes cmd end with everything it started when ctx ends: the
// process runs in a group of its own, which is killed whole, and Wait
// stops waiting for output a leftover child still holds after a moment.
func bound(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
}
