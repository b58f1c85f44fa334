package fakemodal

import (
	"bytes"
	"io"
	"strconv"
	"sync"

	"github.com/airflow-sandbox/airflow-go-worker/internal/randhex"
)

// A real Modal sandbox is one container: a process an exec starts in the
// background lives on after the exec ends, until the sandbox ends. The
// exec driver (the local backend) gives each command a pid namespace that
// dies when the command's shell exits, so the fake runs every command in
// a wrapper that, once the command has ended, reports its exit status on
// both output streams (a line with a random marker, which the fake takes
// off the stream) and then stays while any other process of its namespace
// lives. The client sees the exec end when the command ends; what it left
// in the background runs on, inside the same bubblewrap sandbox and
// limits, until it ends or the sandbox does. (One difference remains: each
// exec has its own pid namespace, so a later exec cannot see or signal an
// earlier one's processes by pid.)

// lingerPoll is how often, in seconds, a wrapper whose command left
// processes behind checks whether they have ended.
const lingerPoll = "1"

// lingeringCommand wraps cmd (a shell command line): run it in a subshell
// (an exit or exec in it ends the subshell, not the wrapper), print
// "<marker> <status>" on stdout and stderr, let go of both and of stdin,
// and wait for the namespace's other processes (pid 1 is bubblewrap's
// init, which reaps them).
func lingeringCommand(cmd, marker string) string {
	return "(\n" + cmd + "\n)\nc=$?\nprintf '%s %d\\n' " + marker + ` "$c"; printf '%s %d\n' ` + marker + ` "$c" >&2
exec </dev/null >/dev/null 2>&1
while :; do
  o=; for p in /proc/[0-9]*; do p=${p#/proc/}; [ "$p" = 1 ] || [ "$p" = "$$" ] || { o=1; break; }; done
  [ -n "$o" ] || exit "$c"
  sleep ` + lingerPoll + `
done`
}

// newMarker is a fresh marker for one exec.
func newMarker() string { return "fakemodal-exit-" + randhex.String(16) }

// markerScanner passes a stream on to dst until the wrapper's marker line,
// which it takes off and reports (its status on found); it drops what
// follows. It holds back only what could be the start of the marker.
type markerScanner struct {
	dst   io.Writer
	mark  []byte // marker + " "
	mu    sync.Mutex
	held  []byte
	done  bool
	found chan int // gets the status once
}

func newMarkerScanner(dst io.Writer, marker string) *markerScanner {
	return &markerScanner{dst: dst, mark: []byte(marker + " "), found: make(chan int, 1)}
}

func (m *markerScanner) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done {
		return len(p), nil
	}
	m.held = append(m.held, p...)
	i := bytes.Index(m.held, m.mark)
	if i < 0 {
		keep := min(len(m.held), len(m.mark)-1)
		err := m.pass(len(m.held) - keep)
		return len(p), err
	}
	if err := m.pass(i); err != nil {
		return len(p), err
	}
	rest := m.held[len(m.mark):]
	end := bytes.IndexByte(rest, '\n')
	if end < 0 {
		return len(p), nil // the status follows
	}
	code, err := strconv.Atoi(string(rest[:end]))
	if err != nil {
		code = 255
	}
	m.done, m.held = true, nil
	m.found <- code
	return len(p), nil
}

// pass writes the first n held bytes to dst.
func (m *markerScanner) pass(n int) error {
	if n <= 0 {
		return nil
	}
	_, err := m.dst.Write(m.held[:n])
	m.held = append(m.held[:0], m.held[n:]...)
	return err
}

// flush passes on what it held back, for a stream that ended without the
// marker (the wrapper was killed, or the command replaced it).
func (m *markerScanner) flush() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.done {
		_ = m.pass(len(m.held))
		m.done = true
	}
}
