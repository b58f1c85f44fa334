package deadline

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

func (f *fakeT) Deadline() (time.Time, bool) { return f.end, !f.end.IsZero() }

func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestOfLeavesAMarginBeforeTheBinarysDeadline(t *testing.T) {
	end := time.Now().Add(10 * time.Minute)
	if got := Of(&fakeT{end: end}); !got.Equal(end.Add(-Margin)) {
		t.Fatalf("Of = %v, want %v", got, end.Add(-Margin))
	}
	soon := time.Now().Add(time.Second)
	if got := Of(&fakeT{end: soon}); !got.Before(soon) || got.Before(time.Now()) {
		t.Fatalf("with a second left, Of = %v, want between now and %v", got, soon)
	}
	if got := Of(&fakeT{}); !got.IsZero() {
		t.Fatalf("without a deadline, Of = %v, want none", got)
	}
}

func TestWaitReturnsWhatArrives(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if got := Wait(t, "seven", ch); got != 7 {
		t.Fatalf("Wait = %d", got)
	}
}

// A wait that never ends fails the test, naming what it waited for,
// before the binary's deadline.
func TestWaitGivesUpBeforeTheDeadline(t *testing.T) {
	f := &fakeT{end: time.Now().Add(200 * time.Millisecond)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Wait(f, "the reply", make(chan int))
	}()
	<-done
	if !strings.Contains(f.failed, "gave up waiting for the reply") {
		t.Fatalf("failed with %q", f.failed)
	}
	if time.Now().After(f.end) {
		t.Fatalf("gave up after the deadline %v", f.end)
	}
}

func TestContextEndsWithTheTest(t *testing.T) {
	var ctx interface{ Err() error }
	t.Run("sub", func(t *testing.T) {
		c := Context(t)
		d, ok := c.Deadline()
		if want := Of(t); ok != !want.IsZero() || !d.Equal(want) {
			t.Fatalf("the context's deadline is %v (%v), want %v", d, ok, want)
		}
		ctx = c
	})
	if ctx.Err() == nil {
		t.Fatal("the context outlived its test")
	}
}
