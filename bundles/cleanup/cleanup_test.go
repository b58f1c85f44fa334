package cleanup

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"
)

func TestContextOutsideTheRuntimeLastsMax(t *testing.T) {
	task, cancelTask := context.WithCancel(context.Background())
	c, cancel := Context(task, time.Hour)
	defer cancel()
	cancelTask()
	if c.Err() != nil {
		t.Fatal("cleanup must survive the task's cancellation")
	}
	if d, ok := c.Deadline(); !ok || time.Until(d) < 59*time.Minute {
		t.Fatalf("deadline %v, want about an hour", d)
	}
}

// Once the task is cancelled, cleanup ends with the grace (less Reserve),
// with cause ErrGraceOver, and the Grace counts it as cut; cleanup that
// ends first is not counted.
func TestContextEndsWithTheGrace(t *testing.T) {
	task, cancelTask := context.WithCancel(context.Background())
	task, g := WithGrace(task, Reserve+200*time.Millisecond)
	finished, cancelFinished := Context(task, time.Hour)
	slow, cancelSlow := Context(task, time.Hour)
	defer cancelSlow()
	cancelTask()
	cancelFinished() // this cleanup is done before the grace ends
	// The grace, not the cleanup's own hour, ends it: the cause says which.
	deadline.Wait(t, "the grace to end the cleanup", slow.Done())
	if !errors.Is(context.Cause(slow), ErrGraceOver) {
		t.Fatalf("cause %v, want ErrGraceOver", context.Cause(slow))
	}
	if errors.Is(context.Cause(finished), ErrGraceOver) {
		t.Fatal("a cleanup that finished was cut")
	}
	if g.Cut() != 1 {
		t.Fatalf("Cut() = %d, want 1", g.Cut())
	}
	if g.Deadline().IsZero() {
		t.Fatal("the cancellation was not recorded")
	}
}
