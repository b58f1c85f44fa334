package e2e_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/supervisor"
)

// The shipped maintenance Dag (examples/maintenance/bundle.yaml, the
// built-in airflow_go_worker_sweep) removes the sandbox of a run that ended
// without cleaning up, told no run id: it asks the supervisor for the state
// of each owner run. The sandbox of a run still running, and of a run the
// supervisor has never heard of, stay; the storage prefix is swept too, and
// an upload's fresh staging object is left alone.
func TestMaintenanceDagRemovesEndedRunsSandboxes(t *testing.T) {
	w := newWorld(t, "modal")
	sup := w.lifecycleSupervisor()
	provision := func(sup *supervisor.Supervisor, run string) string {
		w.runTask(sup, supervisor.TaskRequest{DagID: "e2e_lifecycle", TaskID: "provision", RunID: run, Conf: map[string]any{"backend": "modal"}}, supervisor.StateSuccess)
		return w.xcom(sup, "e2e_lifecycle", run, "provision", "return_value").(string)
	}
	// A worker died in one run (Airflow then failed it), another run goes on.
	ended, live := provision(sup, "manual__worker_killed"), provision(sup, "manual__still_running")
	if err := sup.SetDagRunState("e2e_lifecycle", "manual__worker_killed", supervisor.DagRunFailed); err != nil {
		t.Fatal(err)
	}
	// A run this Airflow does not know: another deployment's, sharing the
	// Modal app, whose supervisor keeps its own records.
	elsewhere := w.lifecycleSupervisor()
	elsewhere.StateDir = t.TempDir()
	stranger := provision(elsewhere, "manual__elsewhere")
	// An export in flight: its staging object is not a leftover yet.
	w.putObject("converted/orders.jsonl.partial-0123456789abcdef", "half")

	maint := w.supervisor(workerBin, "../examples/maintenance/bundle.yaml")
	maint.StateDir = sup.StateDir // the same Airflow
	res := w.runTask(maint, supervisor.TaskRequest{DagID: "airflow_go_worker_sweep", TaskID: "sweep", RunID: "scheduled__2026-12-02T10:05:00+00:00"}, supervisor.StateSuccess)

	alive := w.alive("modal")
	if slices.Contains(alive, ended) || !slices.Contains(alive, live) || !slices.Contains(alive, stranger) {
		t.Fatalf("alive after the maintenance run: %v; want %s gone, %s and %s kept", alive, ended, live, stranger)
	}
	if !slices.Contains(res.Requests, "GetDagRunState") {
		t.Fatalf("the sweep never asked for a run's state: %v", res.Requests)
	}
	out := w.xcom(maint, "airflow_go_worker_sweep", "scheduled__2026-12-02T10:05:00+00:00", "sweep", "return_value").(map[string]any)
	boxes := out["sandboxes"].([]any)
	modal := boxes[0].(map[string]any)
	if modal["backend"] != "modal" || len(modal["destroyed"].([]any)) != 1 || modal["kept"] != float64(2) {
		t.Fatalf("sweep result %v", modal)
	}
	found := modal["found"].([]any)[0].(map[string]any)
	if found["reason"] != "run ended" || found["run_state"] != "failed" || found["owner"] != "e2e_lifecycle/manual__worker_killed" {
		t.Fatalf("removal recorded as %v", found)
	}
	if st := out["storage"].([]any); len(st) != 1 || st[0].(map[string]any)["prefix"] != "s3://airflow-artifacts/" {
		t.Fatalf("storage reports %v", st)
	}
	if _, ok := w.getObject("converted/orders.jsonl.partial-0123456789abcdef"); !ok {
		t.Fatal("the sweep removed a staging object younger than older_than")
	}
	logs := w.logs.String()
	for _, want := range []string{"destroyed", ended, `reason="run ended"`, `run_state="failed"`, "storage swept", "s3://airflow-artifacts/",
		"could not learn the state of the owner run", "e2e_lifecycle/manual__elsewhere"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the task log lacks %q", want)
		}
	}
}
