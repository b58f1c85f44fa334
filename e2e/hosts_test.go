package e2e_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/supervisor"
)

// Two Celery workers are two hosts: each its own state directory (where
// local sandboxes live) and host name, sharing only Airflow (here, the
// XCom state). A local sandbox provisioned on worker-a and handed to a
// task that lands on worker-b fails that task naming both hosts and the
// fix; collect on worker-a then works, as routing both to one host would.
func TestLocalHandoffAcrossHostsFailsNamingBoth(t *testing.T) {
	w := newWorld(t, "local")
	onHost := func(host string) *supervisor.Supervisor {
		sup := w.lifecycleSupervisor()
		sup.Env = append(append([]string(nil), w.env...),
			"XDG_STATE_HOME="+filepath.Join(w.dir, host), "AIRFLOW_GO_WORKER_HOSTNAME="+host)
		return sup
	}
	a, b := onHost("worker-a"), onHost("worker-b")
	const run = "manual__2026-12-02T11:00:00+00:00"
	w.runTask(a, supervisor.TaskRequest{DagID: "e2e_lifecycle", TaskID: "provision", RunID: run}, supervisor.StateSuccess)
	id := w.xcom(a, "e2e_lifecycle", run, "provision", "return_value").(string)
	if !strings.HasSuffix(id, "@worker-a") {
		t.Fatalf("provision on worker-a returned %q; want the host in the id", id)
	}
	if rec := w.xcom(a, "e2e_lifecycle", run, "provision", "sandbox").(map[string]any); rec["host"] != "worker-a" {
		t.Fatalf("the sandbox record %v does not name its host", rec)
	}

	before := len(w.logs.String())
	w.runTask(b, supervisor.TaskRequest{DagID: "e2e_lifecycle", TaskID: "work", RunID: run, Conf: map[string]any{"command": "true"}}, supervisor.StateFailed)
	log := w.logs.String()[before:]
	for _, want := range []string{"lives on host worker-a", "this task runs on host worker-b", "queue only that worker consumes", "remote backend (modal, opensandbox)"} {
		if !strings.Contains(log, want) {
			t.Errorf("the failed task's log does not say %q:\n%s", want, log)
		}
	}
	w.runTask(b, supervisor.TaskRequest{DagID: "e2e_lifecycle", TaskID: "collect", RunID: run}, supervisor.StateFailed)
	w.runTask(a, supervisor.TaskRequest{DagID: "e2e_lifecycle", TaskID: "collect", RunID: run}, supervisor.StateSuccess)
	left, _ := os.ReadDir(filepath.Join(w.dir, "worker-a", "airflow-go-worker", "sandboxes"))
	for _, e := range left {
		if strings.HasPrefix(e.Name(), "airflow-sandbox-") {
			t.Errorf("collect on worker-a left %s", e.Name())
		}
	}
}
