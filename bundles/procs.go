package bundles

import (
	"runtime"
	"sync"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/onep"
)

// parallelismDelay is how long a forked task runs on one P before it gets
// the runtime's default GOMAXPROCS back.
//
// Most task instances are short, and for a short-lived process the Go
// scheduler's second P costs more than it gains: threads spinning for
// work and goroutines handed from thread to thread took about 12% of a
// ping task's CPU (e2e/startup's harness, 250 interleaved runs). A task
// still running after this long gets every P, so a parallel task loses at
// most this much of its parallelism.
const parallelismDelay = 5 * time.Millisecond

// oneP is the one-P start of a task process: package onep lowered
// GOMAXPROCS in its init because the process was started as a task
// instance, and Serve gives the default back.
type oneP struct {
	mu       sync.Mutex
	armed    bool          // restoreAfter has set the timer
	done     bool          // restore has run
	restored chan struct{} // closed when restore has run (tests wait on it)
}

// startedLowered reports whether package onep started this process on
// one P (a variable for tests).
var startedLowered = onep.Lowered

// startedOnOneP is the oneP of a process that started on one P, or nil.
func startedOnOneP() *oneP {
	if !startedLowered() {
		return nil
	}
	return newOneP()
}

func newOneP() *oneP { return &oneP{restored: make(chan struct{})} }

// restoreAfter gives the runtime's default back once the task has run for
// d. Called when the task starts: the wait for StartupDetails, which under
// Airflow can be long, costs no CPU and must not use the delay up.
func (p *oneP) restoreAfter(d time.Duration) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.armed && !p.done {
		p.armed = true
		time.AfterFunc(d, p.restore)
	}
}

// release runs when serving ends. A task that started has its timer (or
// the process exits first, which is the point: a short task never pays for
// a second P); anything else gets the default back now, so that an
// in-process caller of Serve is not left on one P.
func (p *oneP) release() {
	if p == nil {
		return
	}
	p.mu.Lock()
	armed := p.armed
	p.mu.Unlock()
	if !armed {
		p.restore()
	}
}

// restore sets the runtime's default (container-aware, and kept up to
// date by the runtime from then on, as if it had never been changed),
// unless the task has chosen a GOMAXPROCS of its own meanwhile.
func (p *oneP) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return
	}
	p.done = true
	if runtime.GOMAXPROCS(0) == 1 {
		runtime.SetDefaultGOMAXPROCS()
	}
	close(p.restored)
}
