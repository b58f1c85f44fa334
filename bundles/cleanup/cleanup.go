// Package cleanup bounds the work a task does after it is cancelled
// (destroying its sandbox, aborting an upload) by the bundle runtime's
// cancel grace: Airflow SIGKILLs a task that has not exited a few seconds
// after SIGTERM, so cleanup that outlives the grace is lost anyway. Such
// work runs under Context, which survives the task's cancellation but ends
// when the grace does; the runtime then says in the task log whether
// cleanup finished or was cut short.
//
// It has no dependencies, so task code can use it without importing the
// runtime.
package cleanup

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrGraceOver is the cause of a cleanup context the cancel grace ended.
var ErrGraceOver = errors.New("the cancel grace ran out, so this cleanup was cut short")

// Reserve is how much of the grace is kept for the runtime to report the
// outcome after cleanup stops.
const Reserve = 500 * time.Millisecond

type key struct{}

// Grace is the runtime's record of one task's cancel grace.
type Grace struct {
	grace   time.Duration
	reserve time.Duration

	mu          sync.Mutex
	cancelledAt time.Time
	cut         int
}

// WithGrace returns ctx carrying a Grace of the given length; the runtime
// calls it on the task's context and Cancelled when it cancels the task.
func WithGrace(ctx context.Context, grace time.Duration) (context.Context, *Grace) {
	return WithGraceReserve(ctx, grace, Reserve)
}

// WithGraceReserve is WithGrace keeping reserve, not Reserve, for the
// runtime's report; tests widen it so that a loaded machine cannot turn a
// cut cleanup into a task that missed the grace.
func WithGraceReserve(ctx context.Context, grace, reserve time.Duration) (context.Context, *Grace) {
	g := &Grace{grace: grace, reserve: reserve}
	return context.WithValue(ctx, key{}, g), g
}

// Cancelled records when the task was cancelled (the first call counts).
func (g *Grace) Cancelled(at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cancelledAt.IsZero() {
		g.cancelledAt = at
	}
}

// Deadline is when cleanup must stop, or the zero time before cancellation.
func (g *Grace) Deadline() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cancelledAt.IsZero() {
		return time.Time{}
	}
	return g.cancelledAt.Add(g.grace - g.reserve)
}

// Cut is how many cleanup contexts the grace ended before they finished.
func (g *Grace) Cut() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cut
}

// Context returns a context for cleanup after ctx (the task's context) may
// be cancelled: it is not cancelled with ctx, lasts at most max, and, once
// ctx is cancelled, ends when the runtime's cancel grace does (cause
// ErrGraceOver). Outside the runtime it only lasts max.
func Context(ctx context.Context, max time.Duration) (context.Context, context.CancelFunc) {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), max)
	g, ok := ctx.Value(key{}).(*Grace)
	if !ok {
		return c, cancel
	}
	c, cancelCause := context.WithCancelCause(c)
	var mu sync.Mutex
	var timer *time.Timer
	stop := context.AfterFunc(ctx, func() {
		g.Cancelled(time.Now())
		mu.Lock()
		defer mu.Unlock()
		timer = time.AfterFunc(time.Until(g.Deadline()), func() {
			if c.Err() == nil {
				g.mu.Lock()
				g.cut++
				g.mu.Unlock()
				cancelCause(ErrGraceOver)
			}
		})
	})
	return c, func() {
		stop()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancelCause(context.Canceled)
		cancel()
	}
}
