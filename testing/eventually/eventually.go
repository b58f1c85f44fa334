// Package eventually waits in tests for a condition nothing signals (a
// process gone from /proc, a count a server keeps), checking it every
// 10 ms, so no test writes its own deadline loop or sleeps as
// synchronisation. Where something can signal (a log line, a child's
// output), testing/waitwriter is better. A test's wait has no fixed
// limit, which a loaded host can miss: it gives up only near the test
// binary's deadline (testing/deadline). Built on internal/poll.
package eventually

import (
	"context"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/internal/poll"
	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"
)

// Pace is how often cond is checked.
const Pace = 10 * time.Millisecond

// True returns once cond returns true; if it has not by the test binary's
// deadline, it fails t, saying what it waited for. cond runs on the
// caller's goroutine, so it may fail t itself.
func True(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !Holds(t, cond) {
		t.Fatalf("gave up waiting for %s: the test binary's deadline (go test -timeout) is near", what)
	}
}

// Holds reports whether cond returned true before the test binary's
// deadline: for a caller whose failure has more to say than True's.
func Holds(t testing.TB, cond func() bool) bool {
	within := time.Duration(1<<63 - 1)
	if end := deadline.Of(t); !end.IsZero() {
		within = time.Until(end)
	}
	return Within(within, cond)
}

// Within reports whether cond returned true within `within`. It is for
// a bound that is part of what is measured or checked (a benchmark's
// settling, a goroutine that may not fail the test), never for a test
// waiting on what it expects to happen: that is True or Holds.
func Within(within time.Duration, cond func() bool) bool {
	return poll.UntilTrue(context.Background(), within, poll.Every(Pace), cond) == nil
}
