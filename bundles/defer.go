package bundles

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// A deferred Go task (docs/deferral.md) ends its process with DeferTask and
// a timer trigger Airflow ships; the triggerer fires it at the poll time
// and the scheduler runs the task instance again, on any worker, with
// next_method and next_kwargs in its ti_context. The runtime hands the
// state back as TaskInstance.Resumed and calls the same function.
const (
	// resumeMethod is the next_method every Go deferral names.
	resumeMethod = "execute_go_resume"
	// failMethod is the next_method the scheduler sets when a trigger
	// timed out or failed (Airflow's TRIGGER_FAIL_REPR).
	failMethod = "__fail__"
	// dateTimeTrigger is the timer trigger: apache-airflow-providers-standard,
	// which every Airflow 3 install has, so no package of ours is needed on
	// the triggerer.
	dateTimeTrigger = "airflow.providers.standard.triggers.temporal.DateTimeTrigger"
	// stateKey and deferralsKey are the runtime's keys in next_kwargs; the
	// trigger's event arrives beside them under "event".
	stateKey     = "go_state"
	deferralsKey = "go_deferrals"
	// triggerTimeoutMargin is how long after the execution timeout's
	// deadline the trigger itself times out: the timer fires at the
	// deadline at the latest, so the resume (which fails the task as
	// timed out, letting it clean up) normally comes first; the trigger
	// timeout is the backstop for a trigger that never fires.
	triggerTimeoutMargin = 2 * time.Minute
)

// deferral is the error Defer returns.
type deferral struct {
	poll  time.Duration
	state json.RawMessage
}

func (d *deferral) Error() string { return fmt.Sprintf("deferred for %s", d.poll) }

// Defer returns an error that ends the task deferred: its process exits
// and frees the worker slot, and after poll Airflow's triggerer has the
// task instance run again (on any worker) with state, JSON-encoded, in
// TaskInstance.Resumed. The resumed run calls the same function with its
// inputs bound as before; it finishes, fails or defers again. The
// execution timeout (WithExecutionTimeout) counts the deferred time.
func Defer(poll time.Duration, state any) error {
	if poll <= 0 {
		return FailNoRetry(fmt.Errorf("bundles.Defer: the poll interval is %s; give a positive duration", poll))
	}
	data, err := json.Marshal(state)
	if err != nil {
		return FailNoRetry(fmt.Errorf("bundles.Defer: the state cannot be encoded as JSON, so the resumed task could not read it: %w", err))
	}
	return &deferral{poll: poll, state: data}
}

// resumeOf reads a resumed run's next_method and next_kwargs into ti. A
// trigger that timed out or failed is the task's failure; a next_method or
// state this runtime did not write is a final one.
func resumeOf(sd protocol.StartupDetails, ti *TaskInstance, log hclog.Logger) error {
	switch sd.NextMethod {
	case "":
		return nil
	case failMethod:
		return triggerFailure(sd.NextKwargs, log)
	case resumeMethod:
	default:
		return FailNoRetry(fmt.Errorf("the task instance was resumed with next_method %q, which no Go task defers to (a Go task resumes with %q); clear the task instance to run it afresh", sd.NextMethod, resumeMethod))
	}
	state, ok := sd.NextKwargs[stateKey].(string)
	if !ok || !json.Valid([]byte(state)) {
		return FailNoRetry(fmt.Errorf("the resumed task instance's next_kwargs carry no JSON state under %q (got %s), so the task cannot tell where it left off; clear the task instance to run it afresh", stateKey, describeState(sd.NextKwargs[stateKey])))
	}
	ti.Resumed = state
	switch n := sd.NextKwargs[deferralsKey].(type) {
	case int64:
		ti.Deferrals = int(n)
	case float64:
		ti.Deferrals = int(n)
	case int:
		ti.Deferrals = n
	}
	log.Info("resuming the deferred task", "deferrals", ti.Deferrals)
	return nil
}

func describeState(v any) string {
	if v == nil {
		return "nothing"
	}
	s := fmt.Sprintf("%T %v", v, v)
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return s
}

// triggerFailure is what Airflow's resume_execution raises for __fail__:
// TaskDeferralTimeout for a timeout, TaskDeferralError otherwise; both
// are retried when retries are left.
func triggerFailure(kwargs map[string]any, log hclog.Logger) error {
	reason, _ := kwargs["error"].(string)
	if tb, ok := kwargs["traceback"].([]any); ok && len(tb) > 0 {
		lines := make([]string, 0, len(tb))
		for _, l := range tb {
			lines = append(lines, fmt.Sprint(l))
		}
		log.Error("the trigger failed", "traceback", strings.Join(lines, ""))
	}
	if reason == "Trigger timeout" {
		return errors.New("the deferral timed out: the trigger's timeout (the task's execution_timeout plus a margin) passed before the task resumed; a sandbox it left running is removed by its lifetime and the maintenance sweep")
	}
	if reason == "" {
		reason = "Unknown"
	}
	return fmt.Errorf("the trigger of the deferred task failed (%s); a sandbox it left running is removed by its lifetime and the maintenance sweep", reason)
}

// executionDeadline is when the execution timeout ends: counted from the
// task instance's first start, which the Execution API keeps across
// deferrals, so the deferred time counts (zero: no timeout).
func executionDeadline(timeout time.Duration, sd protocol.StartupDetails, now time.Time) time.Time {
	if timeout <= 0 {
		return time.Time{}
	}
	start := now
	if sd.NextMethod != "" && !sd.TIStartDate.IsZero() && sd.TIStartDate.Before(now) {
		start = sd.TIStartDate
	}
	return start.Add(timeout)
}

// deferBody is the DeferTask frame for d: a DateTimeTrigger at now+poll
// (never past the execution deadline), its timeout the deadline plus a
// margin, and the state and deferral count in next_kwargs.
func deferBody(d *deferral, now, deadline time.Time, deferrals int, mapIndex *string, log hclog.Logger) protocol.Body {
	moment := now.Add(d.poll)
	var timeout *string
	if !deadline.IsZero() {
		if moment.After(deadline) {
			moment = deadline
		}
		t := isoDuration(deadline.Sub(now) + triggerTimeoutMargin)
		timeout = &t
	}
	log.Info("task deferred; the triggerer resumes it", "resume_at", moment.UTC().Format(time.RFC3339), "poll", d.poll.String(), "deferrals", deferrals+1)
	return &protocol.DeferTask{
		State:          "deferred",
		Classpath:      dateTimeTrigger,
		TriggerKwargs:  map[string]any{"moment": serdeDateTime(moment), "end_from_trigger": false},
		TriggerTimeout: timeout,
		NextMethod:     resumeMethod,
		NextKwargs:     map[string]any{stateKey: string(d.state), deferralsKey: deferrals + 1},
		// The Python task runner sends none with DeferTask; the UI keeps
		// what SetRenderedMapIndex set.
		RenderedMapIndex: mapIndex,
	}
}

// serdeDateTime is t as airflow.sdk.serde serializes a UTC pendulum
// DateTime (what DateTimeTrigger's moment is), which the triggerer
// deserializes into the trigger's kwargs.
func serdeDateTime(t time.Time) map[string]any {
	return map[string]any{
		"__classname__": "pendulum.datetime.DateTime",
		"__version__":   2,
		"__data__": map[string]any{
			"timestamp": float64(t.UnixMicro()) / 1e6,
			"tz": map[string]any{
				"__classname__": "builtins.tuple",
				"__version__":   1,
				"__data__":      []any{"UTC", "pendulum.tz.timezone.Timezone", 1, true},
			},
		},
	}
}

// isoDuration is d as an ISO 8601 duration, the form trigger_timeout
// (a timedelta) takes on the wire.
func isoDuration(d time.Duration) string {
	return fmt.Sprintf("PT%.3fS", d.Seconds())
}

// withExecutionDeadline cancels the task with the execution timeout's
// error at deadline (at once when it has passed: a resume after it runs
// the task with its context cancelled, so it cleans up and fails as
// timed out). A zero deadline sets nothing.
func withExecutionDeadline(cancel func(error), timeout time.Duration, deadline time.Time) (stop func() bool) {
	if deadline.IsZero() {
		return func() bool { return false }
	}
	return time.AfterFunc(max(time.Until(deadline), 0), func() { cancel(&executionTimeoutError{timeout: timeout}) }).Stop
}
