package supervisor

import (
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"
)

func TestParseISODuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"PT62.500S": 62500 * time.Millisecond, "P1DT2H3M4S": 26*time.Hour + 3*time.Minute + 4*time.Second, "PT0S": 0,
	} {
		if got, err := parseISODuration(in); err != nil || got != want {
			t.Errorf("%s: %s, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"62", "PT", "P1H", "PTxS", "PT1D"} {
		if _, err := parseISODuration(bad); err == nil && bad != "PT" {
			t.Errorf("%q was accepted", bad)
		}
	}
}

// The local supervisor fires only the timer trigger, and reads its moment
// and timeout.
func TestDeferralOfReadsTheTrigger(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	moment := map[string]any{"__classname__": "pendulum.datetime.DateTime", "__version__": int64(2),
		"__data__": map[string]any{"timestamp": float64(now.Add(30 * time.Second).Unix()), "tz": nil}}
	body := map[string]any{"classpath": dateTimeTrigger, "next_method": "m", "next_kwargs": map[string]any{"go_state": "1"},
		"trigger_kwargs": map[string]any{"moment": moment, "end_from_trigger": false}, "trigger_timeout": "PT60S"}
	d, err := deferralOf(body, now)
	if err != nil {
		t.Fatal(err)
	}
	if !d.ResumeAt.Equal(now.Add(30*time.Second)) || !d.TimesOutAt.Equal(now.Add(time.Minute)) || d.NextMethod != "m" {
		t.Fatalf("read %+v", d)
	}
	body["classpath"] = "my.Trigger"
	if _, err := deferralOf(body, now); err == nil {
		t.Fatal("a trigger the local supervisor cannot fire was accepted")
	}
}

// run plays deferral to the end: each DeferTask is accepted (it passes
// the request rules of Airflow's model), the same task instance resumes
// with next_method and next_kwargs, and the task finishes.
func TestRunDeferrableResumesTheSameTaskInstanceToItsEnd(t *testing.T) {
	s, logs := newSup(t)
	res, deferrals, err := s.RunDeferrable(deadline.Context(t), TaskRequest{DagID: "deferral", TaskID: "poll", RunID: "r1"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.State != StateSuccess || deferrals != 2 || len(res.Rejected) > 0 {
		t.Fatalf("state %s after %d deferrals (rejected %v); logs:\n%s", res.State, deferrals, res.Rejected, logs.String())
	}
	v, ok, err := s.GetMappedXCom("deferral", "r1", "poll", "return_value", -1)
	if err != nil || !ok || !strings.HasPrefix(v.(string), "polled 2 times, ") {
		t.Fatalf("return_value %v %v %v", v, ok, err)
	}
	if !strings.Contains(logs.String(), "resuming the deferred task (deferral 2") {
		t.Fatalf("the log does not show the resumes:\n%s", logs.String())
	}
}
