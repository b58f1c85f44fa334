package realsdk_test

import (
	"testing"
	"time"
)

// A Go task that defers, under Airflow 3.3's own coordinator and
// supervisor: the supervisor turns its DeferTask into the deferred state
// update, which the stand-in Execution API validates as Airflow's route
// does; the harness then fires the trigger by Airflow's code (the
// standard provider's DateTimeTrigger, built from the stored kwargs as the
// triggerer builds it) and merges its event into next_kwargs as
// handle_event_submit does, and the same task instance runs again with
// them in its TIRunContext. The task defers twice and finishes.
func TestDeferralUnderAirflow33(t *testing.T) {
	root := t.TempDir()
	pack(t, root, "a.bundle", bundleA)
	c := tcase{Roots: []string{root}, DagID: "deferral", TaskID: "poll", MaxTries: 1, ShouldRetry: true}
	first, resume1, resume2 := c, c, c
	first.Name = "defer"
	resume1.Name, resume1.ResumeOf = "resume1", "defer"
	resume2.Name, resume2.ResumeOf = "resume2", "resume1"
	res := runCases(t, []tcase{first, resume1, resume2})

	r := res["defer"]
	r.ranClean(t)
	body := r.onlyState(t, "deferred")
	if r.StateUpdate == nil {
		t.Fatalf("the Execution API did not accept the deferred state: %v", r.APICalls)
	}
	if body["classpath"] != "airflow.providers.standard.triggers.temporal.DateTimeTrigger" || body["next_method"] != "execute_go_resume" {
		t.Errorf("the deferral names trigger %v and next_method %v", body["classpath"], body["next_method"])
	}
	kw, _ := body["next_kwargs"].(map[string]any)
	if kw["go_state"] != "1" || kw["go_deferrals"] != float64(1) {
		t.Errorf("next_kwargs %v, want go_state \"1\" and go_deferrals 1", kw)
	}
	firstTimeout := triggerTimeout(t, r)
	if firstTimeout <= time.Hour || firstTimeout > time.Hour+3*time.Minute {
		t.Errorf("trigger_timeout %s, want the hour's execution timeout plus the margin", firstTimeout)
	}

	r = res["resume1"]
	r.ranClean(t)
	if r.ResumedWith == nil || r.ResumedWith["next_method"] != "execute_go_resume" {
		t.Fatalf("resume1 was not resumed with execute_go_resume: %v", r.ResumedWith)
	}
	kw, _ = r.ResumedWith["next_kwargs"].(map[string]any)
	if _, ok := kw["event"]; !ok || kw["go_state"] != "1" {
		t.Errorf("the resume's next_kwargs %v lack the trigger's event or the state", kw)
	}
	if !r.logged("resuming the deferred task") {
		t.Errorf("the task log does not say it resumed: %v", r.Logs)
	}
	body = r.onlyState(t, "deferred")
	kw, _ = body["next_kwargs"].(map[string]any)
	if kw["go_state"] != "2" || kw["go_deferrals"] != float64(2) {
		t.Errorf("the second deferral's next_kwargs %v, want go_state \"2\" and go_deferrals 2", kw)
	}
	// The execution timeout counts from the first start, which the
	// TIRunContext of a resume carries: the trigger's timeout shrank by at
	// least the second the trigger waited.
	if d := firstTimeout - triggerTimeout(t, r); d < time.Second {
		t.Errorf("the resume's trigger_timeout is only %s shorter than the first's: the deferred time did not count", d)
	}

	r = res["resume2"]
	r.ranClean(t)
	r.onlyState(t, "success")
	if got := r.xcomPosts()["poll/return_value"]; got != "polled 2 times, deferred 2 times" {
		t.Errorf("the task returned %v", got)
	}
	if r.ResumedWith == nil || r.ResumedWith["next_method"] != "execute_go_resume" {
		t.Errorf("resume2 was not resumed with execute_go_resume: %v", r.ResumedWith)
	}
}

// triggerTimeout is the trigger_timeout of the deferred state update the
// API accepted.
func triggerTimeout(t *testing.T, r *result) time.Duration {
	t.Helper()
	if r.TriggerTimeoutSeconds == nil {
		t.Fatalf("%s: the deferral has no trigger_timeout: %v", r.Name, r.StateUpdate)
	}
	return time.Duration(*r.TriggerTimeoutSeconds * float64(time.Second))
}
