// Package deadline bounds a test's waits by the test binary's own
// deadline (go test -timeout) instead of a fixed wall-clock limit: on a
// loaded host a reply may come after any fixed limit, and a test that
// fails then proves nothing. A wait that never ends still fails the test,
// saying what it waited for, shortly before go test would panic with
// every goroutine's stack.
package deadline

import (
	"context"
	"testing"
	"time"
)

// Margin is how long before the binary's deadline a wait gives up, so the
// failure and the test's cleanup are reported before go test panics. When
// less than twice that is left, half of what is left.
const Margin = 30 * time.Second

// Of is when t's waits give up, or the zero time when t has no deadline
// (go test -timeout 0, or a benchmark).
func Of(t testing.TB) time.Time {
	d, ok := t.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return time.Time{}
	}
	end, ok := d.Deadline()
	if !ok {
		return time.Time{}
	}
	if left := time.Until(end); left < 2*Margin {
		return end.Add(-left / 2)
	}
	return end.Add(-Margin)
}

// Context ends at Of(t), and when t's cleanups run (it works inside a
// cleanup too, unlike t.Context()).
func Context(t testing.TB) context.Context {
	ctx, cancel := Bound(t, context.Background())
	t.Cleanup(cancel)
	return ctx
}

// Bound is parent, ending at Of(t) too: for a test that cancels the
// context itself.
func Bound(t testing.TB, parent context.Context) (context.Context, context.CancelFunc) {
	if end := Of(t); !end.IsZero() {
		return context.WithDeadline(parent, end)
	}
	return context.WithCancel(parent)
}

// Wait receives from ch. If Of(t) passes first it fails t, naming what it
// waited for; the caller's cleanups (killing a child, say) run then.
func Wait[V any](t testing.TB, what string, ch <-chan V) V {
	t.Helper()
	var never <-chan time.Time
	if end := Of(t); !end.IsZero() {
		timer := time.NewTimer(time.Until(end))
		defer timer.Stop()
		never = timer.C
	}
	select {
	case v := <-ch:
		return v
	case <-never:
		t.Fatalf("gave up waiting for %s: the test binary's deadline (go test -timeout) is near", what)
		panic("unreachable")
	}
}
