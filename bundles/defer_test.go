package bundles

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"
	"github.com/airflow-sandbox/airflow-go-worker/testing/pyenv"
)

type pollState struct {
	Command int   `json:"command"`
	Offset  int64 `json:"offset"`
}

// airflowOnDefer runs python/realsdk/deferral.py: the task SDK's DeferTask
// model validates the body, the standard provider's DateTimeTrigger is
// built from its kwargs as the triggerer builds it (airflow.sdk.serde),
// and the next_kwargs a resume gets are merged as Airflow merges them.
type airflowOnDefer struct {
	Classpath         string         `json:"classpath"`
	Moment            time.Time      `json:"moment"`
	EndFromTrigger    bool           `json:"end_from_trigger"`
	Roundtrip         bool           `json:"trigger_kwargs_roundtrip"`
	TimeoutSeconds    *float64       `json:"trigger_timeout_seconds"`
	NextMethod        string         `json:"next_method"`
	ResumedNextKwargs map[string]any `json:"resumed_next_kwargs"`
}

func runAirflowOnDefer(t *testing.T, body map[string]any) airflowOnDefer {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	cmd := pyenv.Command(deadline.Context(t), t, nil, "realsdk/deferral.py")
	cmd.Stdin = bytes.NewReader(data)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("Airflow refused the DeferTask %s: %v\n%s", data, err, stderr.String())
	}
	var got airflowOnDefer
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("deferral.py printed %q: %v", out, err)
	}
	return got
}

// A task that defers sends a DeferTask Airflow's own model accepts, with a
// DateTimeTrigger at now+poll the triggerer can build, and the resume
// Airflow makes of it hands the task its state back.
func TestDeferSendsWhatAirflowAcceptsAndTheResumeGetsTheStateBack(t *testing.T) {
	var resumed []string
	var deferrals []int
	task := func(ti TaskInstance) (string, error) {
		resumed, deferrals = append(resumed, ti.Resumed), append(deferrals, ti.Deferrals)
		if ti.Resumed == "" {
			return "", Defer(30*time.Second, pollState{Command: 1, Offset: 42})
		}
		return "done", nil
	}
	before := time.Now()
	s := runOne(t, task, nil, nil, WithExecutionTimeout(time.Hour))
	if s.terminal.Type() != protocol.TypeDeferTask {
		t.Fatalf("terminal %v, want DeferTask", s.terminal.Body)
	}
	af := runAirflowOnDefer(t, s.terminal.Body)
	if af.Classpath != dateTimeTrigger || af.EndFromTrigger || !af.Roundtrip || af.NextMethod != resumeMethod {
		t.Fatalf("Airflow read the deferral as %+v", af)
	}
	if lo, hi := before.Add(30*time.Second), time.Now().Add(30*time.Second); af.Moment.Before(lo.Add(-time.Millisecond)) || af.Moment.After(hi) {
		t.Fatalf("the trigger fires at %s, want now+30s (between %s and %s)", af.Moment, lo, hi)
	}
	// The trigger times out a margin after the execution timeout's end.
	if af.TimeoutSeconds == nil || *af.TimeoutSeconds > (time.Hour+triggerTimeoutMargin).Seconds() || *af.TimeoutSeconds < (time.Hour+triggerTimeoutMargin-time.Minute).Seconds() {
		t.Fatalf("trigger_timeout %v s, want about the execution timeout plus %s", af.TimeoutSeconds, triggerTimeoutMargin)
	}
	if _, ok := af.ResumedNextKwargs["event"]; !ok {
		t.Fatalf("Airflow's resume carries no event: %v", af.ResumedNextKwargs)
	}
	s = runOne(t, task, func(sd *protocol.StartupDetails) {
		sd.NextMethod, sd.NextKwargs, sd.TIStartDate = af.NextMethod, af.ResumedNextKwargs, before
	}, nil, WithExecutionTimeout(time.Hour))
	if s.terminal.Type() != protocol.TypeSucceedTask {
		t.Fatalf("the resumed task ended with %v, want SucceedTask", s.terminal.Body)
	}
	if len(resumed) != 2 || resumed[0] != "" || resumed[1] != `{"command":1,"offset":42}` || deferrals[1] != 1 {
		t.Fatalf("the task saw Resumed %q and Deferrals %v over its two runs", resumed, deferrals)
	}
}

// A trigger that timed out resumes the task with __fail__: it fails as
// Airflow's TaskDeferralTimeout does (retried when retries are left),
// without the function running.
func TestATriggerTimeoutFailsTheTaskWithoutRunningIt(t *testing.T) {
	ran := false
	s := runOne(t, func() error { ran = true; return nil }, func(sd *protocol.StartupDetails) {
		sd.ShouldRetry = true
		sd.NextMethod, sd.NextKwargs = failMethod, map[string]any{"error": "Trigger timeout"}
	}, nil)
	if ran {
		t.Fatal("the task ran on a __fail__ resume")
	}
	reason, _ := s.terminal.Body["retry_reason"].(string)
	if s.terminal.Type() != protocol.TypeRetryTask || !strings.Contains(reason, "deferral timed out") {
		t.Fatalf("terminal %v, want RetryTask naming the timed-out deferral", s.terminal.Body)
	}
}

// A resume whose state the runtime did not write (or a next_method no Go
// task defers to) fails for good, saying what to do: retrying would read
// the same state.
func TestABadResumeStateFailsForGood(t *testing.T) {
	for name, mutate := range map[string]func(*protocol.StartupDetails){
		"state not JSON": func(sd *protocol.StartupDetails) {
			sd.NextMethod, sd.NextKwargs = resumeMethod, map[string]any{stateKey: "{not json"}
		},
		"no state": func(sd *protocol.StartupDetails) {
			sd.NextMethod, sd.NextKwargs = resumeMethod, map[string]any{"event": 1}
		},
		"a Python method": func(sd *protocol.StartupDetails) {
			sd.NextMethod, sd.NextKwargs = "execute_complete", map[string]any{}
		},
	} {
		t.Run(name, func(t *testing.T) {
			ran := false
			s := runOne(t, func() error { ran = true; return nil }, func(sd *protocol.StartupDetails) {
				sd.ShouldRetry = true
				mutate(sd)
			}, nil)
			if ran || s.terminal.Type() != protocol.TypeTaskState || s.terminal.Body["state"] != "failed" {
				t.Fatalf("ran %v, terminal %v: want TaskState failed without running", ran, s.terminal.Body)
			}
			if !strings.Contains(strings.Join(logErrors(s), "\n"), "clear the task instance") {
				t.Fatalf("the failure does not say what to do: %v", logErrors(s))
			}
		})
	}
}

func logErrors(s session) []string {
	var out []string
	for _, l := range s.logs {
		if e, ok := l["error"].(string); ok {
			out = append(out, e)
		}
	}
	return out
}

// The execution timeout counts the deferred time: a resume after the
// deadline runs the task with its context already ended by the timeout,
// so it cleans up (convert destroys its sandbox) and fails as timed out;
// a deferral near the deadline resumes at the deadline, not later.
func TestTheExecutionTimeoutCountsTheDeferredTime(t *testing.T) {
	var cause error
	s := runOne(t, func(ctx context.Context, ti TaskInstance) error {
		<-ctx.Done()
		cause = context.Cause(ctx)
		return ctx.Err()
	}, func(sd *protocol.StartupDetails) {
		sd.ShouldRetry = true
		sd.NextMethod, sd.NextKwargs = resumeMethod, map[string]any{stateKey: "{}", deferralsKey: 3}
		sd.TIStartDate = time.Now().Add(-2 * time.Hour)
	}, nil, WithExecutionTimeout(time.Hour))
	reason, _ := s.terminal.Body["retry_reason"].(string)
	if s.terminal.Type() != protocol.TypeRetryTask || !strings.Contains(reason, "execution_timeout of 1h0m0s") {
		t.Fatalf("terminal %v, want RetryTask naming the execution_timeout", s.terminal.Body)
	}
	if _, ok := cause.(*executionTimeoutError); !ok {
		t.Fatalf("the task's context ended with %v, want the execution timeout", cause)
	}

	start := time.Now().Add(-time.Hour + 10*time.Second)
	s = runOne(t, func(ti TaskInstance) error { return Defer(time.Minute, 1) }, func(sd *protocol.StartupDetails) {
		sd.NextMethod, sd.NextKwargs, sd.TIStartDate = resumeMethod, map[string]any{stateKey: "1", deferralsKey: 1}, start
	}, nil, WithExecutionTimeout(time.Hour))
	if s.terminal.Type() != protocol.TypeDeferTask {
		t.Fatalf("terminal %v, want DeferTask", s.terminal.Body)
	}
	af := runAirflowOnDefer(t, s.terminal.Body)
	if want := start.Add(time.Hour); !af.Moment.Equal(want.Truncate(time.Microsecond)) {
		t.Fatalf("the trigger fires at %s, want the execution deadline %s", af.Moment, want)
	}
	if n := s.terminal.Body["next_kwargs"].(map[string]any)[deferralsKey]; toInt64(n) != 2 {
		t.Fatalf("next_kwargs count %v deferrals, want 2", n)
	}
}

func toInt64(v any) int64 {
	switch n := v.(type) {
	case int8:
		return int64(n)
	case int16:
		return int64(n)
	case int32:
		return int64(n)
	case int64:
		return n
	case uint8:
		return int64(n)
	case float64:
		return int64(n)
	}
	return -1
}

// Defer refuses what a resume could not use, for good.
func TestDeferRefusesAStateThatIsNotJSON(t *testing.T) {
	for _, err := range []error{Defer(time.Second, func() {}), Defer(0, 1)} {
		if _, ok := err.(*deferral); ok || !strings.Contains(err.Error(), "bundles.Defer") {
			t.Fatalf("Defer gave %v", err)
		}
	}
}
