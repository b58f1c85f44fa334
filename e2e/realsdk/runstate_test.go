package realsdk_test

import (
	"encoding/json"
	"testing"
)

// GetDagRunState, which sweep uses to learn which owner runs have ended,
// under Airflow 3.3's own supervisor: it validates the request, relays it
// to the Execution API (GET dag-runs/<dag_id>/<run_id>/state) and answers
// DagRunStateResult; a run the API does not have comes back as the 404 the
// runtime reads as ErrDagRunNotFound.
func TestGetDagRunStateUnderAirflow33(t *testing.T) {
	root := t.TempDir()
	pack(t, root, "a.bundle", bundleA)
	runs := []string{"d/manual__2026-12-01T00:00:00+00:00", "d/scheduled__2026-12-01T00:05:00+00:00", "d/live", "d/never"}
	res := runCases(t, []tcase{{Name: "ask", Roots: []string{root}, DagID: "run_states", TaskID: "ask",
		Conf:    map[string]any{"runs": runs},
		DagRuns: map[string]string{runs[0]: "success", runs[1]: "failed", runs[2]: "running"}}})
	r := res["ask"]
	r.ranClean(t)
	r.onlyState(t, "success")
	var got map[string]string
	raw, _ := json.Marshal(r.xcomPosts()["ask/return_value"])
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("return_value %s: %v", raw, err)
	}
	want := map[string]string{runs[0]: "success", runs[1]: "failed", runs[2]: "running", runs[3]: "not found"}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %q, want %q (all: %v)", k, got[k], w, got)
		}
	}
	asked := 0
	for _, c := range r.APICalls {
		if c.Method == "GET" && len(c.Path) > 9 && c.Path[:9] == "dag-runs/" {
			asked++
		}
	}
	if asked != len(runs) {
		t.Errorf("the supervisor relayed %d GetDagRunState calls, want %d: %v", asked, len(runs), r.APICalls)
	}
	replies := 0
	for _, b := range r.Replies {
		if b["type"] == "DagRunStateResult" {
			replies++
		}
	}
	if replies != 3 {
		t.Errorf("want 3 DagRunStateResult replies, got %d: %v", replies, r.Replies)
	}
}
