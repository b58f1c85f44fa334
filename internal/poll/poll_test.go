package poll

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// counter is a condition that holds from its nth call on, counting calls.
type counter struct {
	calls, holdsAt int
}

func (c *counter) cond() (bool, error) {
	c.calls++
	return c.holdsAt > 0 && c.calls >= c.holdsAt, nil
}

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	c := &counter{holdsAt: 3}
	if err := Until(context.Background(), time.Hour, Every(time.Microsecond), c.cond); err != nil {
		t.Fatalf("Until = %v, want nil", err)
	}
	if c.calls != 3 {
		t.Fatalf("cond called %d times, want 3: Until must stop at the first call that holds", c.calls)
	}
}

func TestUntilChecksAtOnce(t *testing.T) {
	c := &counter{holdsAt: 1}
	// A pace of an hour: returning at all proves the first call was not
	// preceded by a wait.
	if err := Until(context.Background(), time.Hour, Every(time.Hour), c.cond); err != nil || c.calls != 1 {
		t.Fatalf("Until = %v after %d calls, want nil after 1", err, c.calls)
	}
}

func TestUntilTimesOut(t *testing.T) {
	c := &counter{} // never holds
	err := Until(context.Background(), time.Millisecond, Every(100*time.Microsecond), c.cond)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Until = %v, want ErrTimeout", err)
	}
	if c.calls < 1 {
		t.Fatal("Until timed out without calling cond")
	}
}

func TestUntilChecksOnceMoreAtTheDeadline(t *testing.T) {
	// The pace is longer than the time allowed: the wait is cut to the
	// deadline, and the condition, true by then, is seen. (50 ms, so a
	// loaded machine cannot use the whole allowance before the first wait.)
	calls := 0
	err := Until(context.Background(), 50*time.Millisecond, Every(time.Hour), func() (bool, error) {
		calls++
		return calls == 2, nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("Until = %v after %d calls, want nil after 2", err, calls)
	}
}

func TestUntilReturnsTheConditionsError(t *testing.T) {
	boom := errors.New("boom")
	calls := 0
	err := Until(context.Background(), time.Hour, Every(time.Microsecond), func() (bool, error) {
		calls++
		if calls == 2 {
			return false, boom
		}
		return false, nil
	})
	if err != boom || calls != 2 {
		t.Fatalf("Until = %v after %d calls, want boom itself after 2", err, calls)
	}
}

func TestUntilEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	// An hour's pace and an hour allowed: only the cancellation ends the
	// wait that follows the first call.
	err := Until(ctx, time.Hour, Every(time.Hour), func() (bool, error) {
		calls++
		cancel()
		return false, nil
	})
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("Until = %v after %d calls, want context.Canceled after 1", err, calls)
	}
}

func TestUntilTrue(t *testing.T) {
	calls := 0
	err := UntilTrue(context.Background(), time.Hour, Every(time.Microsecond), func() bool { calls++; return calls == 2 })
	if err != nil || calls != 2 {
		t.Fatalf("UntilTrue = %v after %d calls, want nil after 2", err, calls)
	}
	if err := UntilTrue(context.Background(), time.Microsecond, Every(time.Microsecond), func() bool { return false }); !errors.Is(err, ErrTimeout) {
		t.Fatalf("UntilTrue never true = %v, want ErrTimeout", err)
	}
}

func TestPaces(t *testing.T) {
	waits := func(p Pace, n int) []time.Duration {
		var out []time.Duration
		for w := p.First; len(out) < n; w = p.next(w) {
			out = append(out, w)
		}
		return out
	}
	us := time.Microsecond
	if got, want := waits(Doubling(50*us, 5*time.Millisecond), 10),
		[]time.Duration{50 * us, 100 * us, 200 * us, 400 * us, 800 * us, 1600 * us, 3200 * us, 5000 * us, 5000 * us, 5000 * us}; !slices.Equal(got, want) {
		t.Errorf("Doubling(50µs, 5ms) waits %v, want %v", got, want)
	}
	if got, want := waits(Every(20*time.Millisecond), 3), []time.Duration{20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond}; !slices.Equal(got, want) {
		t.Errorf("Every(20ms) waits %v, want %v", got, want)
	}
}
