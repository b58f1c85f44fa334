package eventually

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fakeT has the deadline it is given, and records a Fatalf, ending its
// goroutine as testing.T's does.
type fakeT struct {
	testing.TB
	end    time.Time
	failed string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Deadline() (time.Time, bool) { return f.end, true }

func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls True with a fakeT whose binary ends in `left` on a goroutine
// of its own (Fatalf ends it) and returns what it failed with, "" if it
// returned.
func run(left time.Duration, cond func() bool) string {
	f := &fakeT{end: time.Now().Add(left)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		True(f, "the thing", cond)
	}()
	<-done
	return f.failed
}

func TestTrueReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	if failed := run(time.Hour, func() bool { calls++; return calls == 3 }); failed != "" {
		t.Fatalf("True failed: %s", failed)
	}
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3", calls)
	}
}

// A condition that never holds fails the test near the binary's
// deadline, naming what it waited for, and not before: there is no fixed
// limit a loaded host could miss.
func TestTrueFailsNearTheDeadlineNamingWhat(t *testing.T) {
	calls := 0
	start := time.Now()
	failed := run(400*time.Millisecond, func() bool { calls++; return false })
	if calls == 0 {
		t.Fatal("True failed without calling cond")
	}
	if !strings.Contains(failed, "gave up waiting for the thing") || !strings.Contains(failed, "go test -timeout") {
		t.Fatalf("True failed with %q, want it to name the thing and the deadline", failed)
	}
	if waited := time.Since(start); waited < 150*time.Millisecond {
		t.Fatalf("True gave up after %v, long before the deadline 400ms away", waited)
	}
}

func TestWithin(t *testing.T) {
	calls := 0
	if !Within(time.Hour, func() bool { calls++; return calls == 2 }) || calls != 2 {
		t.Fatalf("Within a condition true at its second call: false, or %d calls", calls)
	}
	if Within(time.Millisecond, func() bool { return false }) {
		t.Fatal("Within a condition never true: true")
	}
}
