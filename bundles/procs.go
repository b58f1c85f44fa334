package bundles

import (
	"runtime"
	"sync"
	"time"
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

// oneP is the one-P start of a task process. Only RunMain, whose process
// exits when the task ends, uses it: GOMAXPROCS is process-wide, so a
// library caller of Serve keeps its own.
type oneP struct {
	mu       sync.Mutex
	armed    bool          // restoreAfter has set the timer
	done     bool          // restore has run
	restored chan struct{} // closed when restore has run (tests wait on it)
}

// startOnOneP lowers GOMAXPROCS to 1. It does nothing, and returns nil,
// when GOMAXPROCS is set in the environment (the operator's value wins) or
// the runtime already runs on one P.
func startOnOneP(lookupEnv func(string) (string, bool)) *oneP {
	if _, pinned := lookupEnv("GOMAXPROCS"); pinned || runtime.GOMAXPROCS(0) < 2 {
		return nil
	}
	runtime.GOMAXPROCS(1)
	return &oneP{restored: make(chan struct{})}
}

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
// in-process caller of RunMain is not left on one P.
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
