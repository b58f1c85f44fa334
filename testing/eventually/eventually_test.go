package eventually

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fakeT records a Fatalf and ends its goroutine, as testing.T's does.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls True with a fakeT on a goroutine of its own (Fatalf ends it)
// and returns what it failed with, "" if it returned.
func run(within time.Duration, cond func() bool) string {
	f := &fakeT{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		True(f, "the thing", within, cond)
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

func TestTrueFailsNamingWhatAndHowLong(t *testing.T) {
	calls := 0
	failed := run(time.Millisecond, func() bool { calls++; return false })
	if calls == 0 {
		t.Fatal("True failed without calling cond")
	}
	if !strings.Contains(failed, "the thing") || !strings.Contains(failed, "1ms") {
		t.Fatalf("True failed with %q, want it to name the thing and 1ms", failed)
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
