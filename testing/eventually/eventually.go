// Package eventually waits in tests for a condition nothing signals (a
// process gone from /proc, a count a server keeps), checking it every
// 10 ms up to a bound, so no test writes its own deadline loop or sleeps
// as synchronisation. Where something can signal (a log line, a child's
// output), testing/waitwriter is better. Built on internal/poll.
package eventually

import (
	"context"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/internal/poll"
)

// Pace is how often cond is checked.
const Pace = 10 * time.Millisecond

// True returns once cond returns true; if it has not within `within`, it
// fails t, saying what it waited for and for how long. cond runs on the
// caller's goroutine, so it may fail t itself.
func True(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	if !Within(within, cond) {
		t.Fatalf("timed out after %s waiting for %s", within, what)
	}
}

// Within reports whether cond returned true within `within`: for a
// goroutine that may not fail the test, or a caller whose failure has more
// to say than True's.
func Within(within time.Duration, cond func() bool) bool {
	return poll.UntilTrue(context.Background(), within, poll.Every(Pace), cond) == nil
}
