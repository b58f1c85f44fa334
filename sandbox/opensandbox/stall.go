package opensandbox

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// DefaultStallTimeout is how long a command stream or a download may
// deliver nothing before it is called broken. execd pings every 3 s, so a
// healthy stream is never silent that long.
const DefaultStallTimeout = 2 * time.Minute

// StallError reports a response body that stopped delivering without
// closing: a server or proxy that lost its upstream, or an answer whose
// promised body never comes.
type StallError struct{ Idle time.Duration }

func (e *StallError) Error() string {
	return fmt.Sprintf("the server sent nothing for %v and did not close the connection", e.Idle)
}

// stallGuard closes a body whose Read blocks longer than idle. Only time
// spent inside Read counts, so a slow consumer is never taken for a stalled
// server.
type stallGuard struct {
	rc      io.ReadCloser
	idle    time.Duration
	timer   *time.Timer
	stalled atomic.Bool
}

func newStallGuard(rc io.ReadCloser, idle time.Duration) io.ReadCloser {
	if idle <= 0 {
		return rc
	}
	g := &stallGuard{rc: rc, idle: idle}
	g.timer = time.AfterFunc(time.Hour, func() {
		g.stalled.Store(true)
		rc.Close() // unblocks the Read
	})
	g.timer.Stop()
	return g
}

func (g *stallGuard) Read(p []byte) (int, error) {
	g.timer.Reset(g.idle)
	n, err := g.rc.Read(p)
	g.timer.Stop()
	if err != nil && g.stalled.Load() {
		err = &StallError{Idle: g.idle}
	}
	return n, err
}

func (g *stallGuard) Close() error {
	g.timer.Stop()
	return g.rc.Close()
}
