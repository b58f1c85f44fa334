package supervisor

import (
	"context"
	"fmt"

	"strconv"
	"strings"
	"time"
)

// What the local supervisor plays of Airflow's deferral: the Execution
// API's deferred state (a trigger row, next_method, next_kwargs), the
// triggerer's DateTimeTrigger, the scheduler's trigger timeout
// (next_method __fail__) and the resume (the trigger's event merged into
// next_kwargs under "event", as models/trigger.py's handle_event_submit
// does).

const (
	// dateTimeTrigger is the one trigger class this supervisor can fire;
	// Airflow's triggerer runs any class importable on it.
	dateTimeTrigger = "airflow.providers.standard.triggers.temporal.DateTimeTrigger"
	// triggerFail is Airflow's TRIGGER_FAIL_REPR.
	triggerFail = "__fail__"
)

// Deferral is what one DeferTask asked for.
type Deferral struct {
	Classpath  string
	NextMethod string
	NextKwargs map[string]any
	// ResumeAt is the trigger's moment; Event is the moment as the
	// trigger's event carries it (serde-serialized, as sent).
	ResumeAt time.Time
	Event    any
	// TimesOutAt is when the scheduler would fail the trigger (zero:
	// never).
	TimesOutAt time.Time
}

// deferralOf reads a DeferTask body received at now.
func deferralOf(b map[string]any, now time.Time) (*Deferral, error) {
	d := &Deferral{}
	d.Classpath, _ = b["classpath"].(string)
	d.NextMethod, _ = b["next_method"].(string)
	if kw, ok := b["next_kwargs"].(map[string]any); ok {
		d.NextKwargs = kw
	}
	if d.Classpath != dateTimeTrigger {
		return nil, fmt.Errorf("DeferTask names trigger %q; the local supervisor fires only %s", d.Classpath, dateTimeTrigger)
	}
	kw, _ := b["trigger_kwargs"].(map[string]any)
	moment, err := serdeMoment(kw["moment"])
	if err != nil {
		return nil, fmt.Errorf("DeferTask's trigger_kwargs.moment: %v", err)
	}
	d.ResumeAt, d.Event = moment, kw["moment"]
	if s, ok := b["trigger_timeout"].(string); ok {
		t, err := parseISODuration(s)
		if err != nil {
			return nil, fmt.Errorf("DeferTask's trigger_timeout: %v", err)
		}
		d.TimesOutAt = now.Add(t)
	}
	return d, nil
}

// serdeMoment reads a serde-serialized pendulum DateTime.
func serdeMoment(v any) (time.Time, error) {
	m, _ := v.(map[string]any)
	data, _ := m["__data__"].(map[string]any)
	if m["__classname__"] != "pendulum.datetime.DateTime" || data == nil {
		return time.Time{}, fmt.Errorf("%v is not a serde-serialized pendulum DateTime", v)
	}
	var ts float64
	switch n := data["timestamp"].(type) {
	case float64:
		ts = n
	case int64:
		ts = float64(n)
	default:
		return time.Time{}, fmt.Errorf("its timestamp is %T, not a number", data["timestamp"])
	}
	return time.UnixMicro(int64(ts * 1e6)).UTC(), nil
}

// parseISODuration reads the ISO 8601 durations pydantic writes for a
// timedelta: P[nD][T[nH][nM][n.nS]].
func parseISODuration(s string) (time.Duration, error) {
	rest, ok := strings.CutPrefix(s, "P")
	if !ok {
		return 0, fmt.Errorf("%q is not an ISO 8601 duration", s)
	}
	var total time.Duration
	units := map[byte]time.Duration{'D': 24 * time.Hour, 'H': time.Hour, 'M': time.Minute, 'S': time.Second}
	inTime := false
	for rest != "" {
		if rest[0] == 'T' {
			inTime, rest = true, rest[1:]
			continue
		}
		i := strings.IndexAny(rest, "DHMS")
		if i <= 0 || (rest[i] != 'D') != inTime {
			return 0, fmt.Errorf("%q is not an ISO 8601 duration", s)
		}
		n, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not an ISO 8601 duration", s)
		}
		total += time.Duration(n * float64(units[rest[i]]))
		rest = rest[i+1:]
	}
	return total, nil
}

// RunDeferrable runs a task instance to its end, playing each deferral
// as Airflow would: it waits for the trigger's moment, at most maxWait
// (0: resumes at once), and runs the same task instance again with
// next_method and next_kwargs; a trigger timeout that comes first
// resumes it with __fail__. It returns the last run's result and how many
// times the task deferred.
func (s *Supervisor) RunDeferrable(ctx context.Context, req TaskRequest, maxWait time.Duration) (Result, int, error) {
	if req.TIID == "" {
		req.TIID = newUUID()
	}
	first := time.Now().UTC()
	deferrals := 0
	for {
		res, err := s.RunTask(ctx, req)
		if err != nil || res.State != StateDeferred || res.Deferral == nil {
			return res, deferrals, err
		}
		deferrals++
		d := res.Deferral
		at, method, kwargs := d.ResumeAt, d.NextMethod, cloneMap(d.NextKwargs)
		if kwargs == nil {
			kwargs = map[string]any{}
		}
		kwargs["event"] = d.Event
		if !d.TimesOutAt.IsZero() && d.TimesOutAt.Before(at) {
			at, method, kwargs = d.TimesOutAt, triggerFail, map[string]any{"error": "Trigger timeout"}
		}
		if err := waitUntil(ctx, at, maxWait); err != nil {
			return res, deferrals, err
		}
		if s.Logs != nil {
			(&shower{w: s.Logs}).line("supervisor", fmt.Sprintf("resuming the deferred task (deferral %d, next_method %s)", deferrals, method))
		}
		req.NextMethod, req.NextKwargs, req.TIStartDate = method, kwargs, first
	}
}

// waitUntil waits for at, at most maxWait, or until ctx ends.
func waitUntil(ctx context.Context, at time.Time, maxWait time.Duration) error {
	wait := min(time.Until(at), maxWait)
	if wait <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func cloneMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}
