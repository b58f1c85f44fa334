package bundles

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/cleanup"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// A task chooses its outcome with its error: Skip ends it skipped,
// ErrFailNoRetry failed although Airflow has retries left.
func TestChosenOutcomes(t *testing.T) {
	b := New()
	b.Register("d", "skip", func() error { return fmt.Errorf("nothing to do: %w", Skip("no new orders since %s", "yesterday")) })
	b.Register("d", "final", func() error { return FailNoRetry(errors.New("the input is malformed")) })
	b.Register("d", "final_wrapped", func() error { return fmt.Errorf("bad input: %w", ErrFailNoRetry) })
	b.Register("d", "plain", func() error { return errors.New("flaky") })
	for _, c := range []struct {
		task, typ, state, log string
	}{
		{"skip", protocol.TypeTaskState, "skipped", "no new orders since yesterday"},
		{"final", protocol.TypeTaskState, "failed", "not retried, since retrying cannot fix"},
		{"final_wrapped", protocol.TypeTaskState, "failed", "not retried, since retrying cannot fix"},
		{"plain", protocol.TypeRetryTask, "", "Airflow will retry it"},
	} {
		s := runFake(t, b, startupFrame(t, "d", c.task, func(sd *protocol.StartupDetails) { sd.ShouldRetry = true }), nil, serveConfig{})
		if s.err != nil || s.terminal == nil || s.terminal.Type() != c.typ || fmt.Sprint(s.terminal.Body["state"]) != fmt.Sprint(orNil(c.state)) {
			t.Errorf("%s: want %s %q, got %+v (%v)", c.task, c.typ, c.state, s.terminal, s.err)
		}
		found := false
		for _, l := range s.logs {
			found = found || strings.Contains(fmt.Sprint(l), c.log)
		}
		if !found {
			t.Errorf("%s: the log does not say %q: %v", c.task, c.log, s.logs)
		}
	}
	if FailNoRetry(nil) != nil {
		t.Error("FailNoRetry(nil) must be nil")
	}
	if err := FailNoRetry(errors.New("x")); err.Error() != "x" || !errors.Is(err, ErrFailNoRetry) {
		t.Errorf("FailNoRetry keeps the message and matches ErrFailNoRetry: %v", err)
	}
}

func orNil(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// After cancellation a task's cleanup runs under cleanup.Context: it either
// finishes within the cancel grace, and the log says so, or the grace cuts
// it and the runtime reports the task failed in time, saying that too.
func TestCleanupWithinOrCutByTheGrace(t *testing.T) {
	for _, c := range []struct {
		name      string
		cleanupIn time.Duration // how long the cleanup needs
		want      string
	}{
		{"finishes", 0, "returned within the cancel grace, its cleanup finished"},
		{"cut", time.Hour, "cleanup cut short by the cancel grace"},
	} {
		t.Run(c.name, func(t *testing.T) {
			started := make(chan struct{})
			var cleanupErr error
			b := New()
			b.Register("d", "t", func(ctx context.Context) error {
				close(started)
				<-ctx.Done()
				cctx, cancel := cleanup.Context(ctx, time.Hour)
				defer cancel()
				select {
				case <-time.After(c.cleanupIn):
				case <-cctx.Done():
					cleanupErr = context.Cause(cctx)
				}
				return fmt.Errorf("cancelled: %w", ctx.Err())
			})
			parent, cancel := context.WithCancel(context.Background())
			go func() { <-started; cancel() }()
			s := runFakeWith(t, b, startupFrame(t, "d", "t", nil), nil, serveConfig{cancelGrace: 3 * time.Second, cleanupReserve: 2500 * time.Millisecond}, parent)
			if s.terminal == nil || s.terminal.Body["state"] != "failed" {
				t.Fatalf("want failed, got %+v (%v)", s.terminal, s.err)
			}
			found := false
			for _, l := range s.logs {
				found = found || strings.Contains(fmt.Sprint(l["event"]), c.want)
			}
			if !found {
				t.Fatalf("the log does not say %q: %v", c.want, s.logEvents())
			}
			if c.name == "cut" && !errors.Is(cleanupErr, cleanup.ErrGraceOver) {
				t.Fatalf("the cleanup saw %v, want ErrGraceOver", cleanupErr)
			}
		})
	}
}

func TestCancelGraceFromEnv(t *testing.T) {
	env := func(v string) func(string) (string, bool) {
		return func(k string) (string, bool) { return v, k == cancelGraceEnv && v != "" }
	}
	if d, w := cancelGraceFromEnv(env("")); d != cancelGrace || w != "" {
		t.Errorf("unset: %v %q", d, w)
	}
	if d, w := cancelGraceFromEnv(env("90s")); d != 90*time.Second || w != "" {
		t.Errorf("90s: %v %q", d, w)
	}
	for _, bad := range []string{"soon", "100ms", "-1s"} {
		if d, w := cancelGraceFromEnv(env(bad)); d != cancelGrace || !strings.Contains(w, cancelGraceEnv) {
			t.Errorf("%q: %v %q", bad, d, w)
		}
	}
}
