// Package poll waits for a condition that nothing signals: it calls the
// condition at a pace until it holds, fails, the time allowed passes or the
// context ends. It is the one deadline loop of the module's code and
// tests (testing/eventually wraps it for tests), so each caller keeps only
// its condition and the message saying what to do when it never held.
package poll

import (
	"context"
	"errors"
	"time"
)

// ErrTimeout is what Until returns when the condition did not hold within
// the time allowed; callers turn it into their own message, which knows
// what was awaited and what the user can do.
var ErrTimeout = errors.New("the condition did not hold in the time allowed")

// Pace is how long Until waits between two calls of the condition: First
// after the first call, doubling after each further one up to Max. First
// must be positive: a zero Pace would spin.
type Pace struct {
	First, Max time.Duration
}

// Every waits d between calls.
func Every(d time.Duration) Pace { return Pace{First: d, Max: d} }

// Doubling waits first, then twice as long after each call, up to max: a
// condition that usually holds almost at once is seen early, and one that
// takes longer costs few calls.
func Doubling(first, max time.Duration) Pace { return Pace{First: first, Max: max} }

// next is the wait after one of wait.
func (p Pace) next(wait time.Duration) time.Duration {
	return max(min(2*wait, p.Max), p.First)
}

// Until calls cond until it reports done (nil), returns an error (that
// error, as is), within has passed since Until began (ErrTimeout), or ctx
// ends while it waits (ctx.Err()). cond is called at least once, and once
// more when within runs out during a wait, so a condition that holds by
// the deadline is not reported as timed out. The waits are a timer's, so
// ending ctx ends a wait at once.
func Until(ctx context.Context, within time.Duration, pace Pace, cond func() (done bool, err error)) error {
	deadline := time.Now().Add(within)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for wait := pace.First; ; wait = pace.next(wait) {
		done, err := cond()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return ErrTimeout
		}
		d := min(wait, left)
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d) // the channel was drained, or (Go 1.23+) Reset empties it
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// UntilTrue is Until for a condition that cannot fail.
func UntilTrue(ctx context.Context, within time.Duration, pace Pace, cond func() bool) error {
	return Until(ctx, within, pace, func() (bool, error) { return cond(), nil })
}
