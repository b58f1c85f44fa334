package realsdk_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/supervisor"
)

// Airflow 3.4 (schema 2026-10-30) is not released, so there is no real
// coordinator to run a 3.4 bundle under: this path is tested against our
// own supervisor only, playing 3.4. It shows what changes with the schema:
// the stub call's arguments arrive as arg_bindings, and a failure's reason
// goes out in TaskState.retry_reason.
func TestSchema34AgainstOurSupervisor(t *testing.T) {
	dir := t.TempDir()
	bundle34 := pack(t, dir, "for-3.4.bundle", workerBin, "--airflow", "3.4")
	bundle33 := pack(t, t.TempDir(), "for-3.3.bundle", workerBin)
	env := append(os.Environ(), `AIRFLOW_CONN_WAREHOUSE={"conn_type": "postgres", "host": "db.internal"}`)
	args := `[{"name": "conn_id", "kind": "literal", "value": "warehouse"}]`
	run := func(bundle string, flags ...string) (string, error) {
		cmd := exec.Command(bundle, append([]string{"run", "--dag", selftestDag, "--task", "connection"}, flags...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := run(bundle34, "--airflow", "3.4", "--arg-bindings", args)
	if err != nil || !strings.Contains(out, ": success") || !strings.Contains(out, `"host":"db.internal"`) {
		t.Fatalf("a 3.4 bundle gets the stub call's argument under 3.4: %v\n%s", err, out)
	}
	out, err = run(bundle34, "--arg-bindings", args)
	if err == nil || !strings.Contains(out, "Airflow 3.3's coordinator would reject") || !strings.Contains(out, "Version '2026-10-30' not found in supervisor schema bundle") {
		t.Fatalf("run plays 3.3 by default, which rejects a 3.4 bundle: %v\n%s", err, out)
	}
	out, err = run(bundle33, "--arg-bindings", args)
	if err == nil || !strings.Contains(out, "has no arg_bindings") || !strings.Contains(out, "--airflow 3.4") {
		t.Fatalf("arg_bindings with a 3.3 bundle must be refused with the way out: %v\n%s", err, out)
	}

	// A failure's reason: in TaskState.retry_reason on 2026-10-30 only.
	for _, c := range []struct {
		bundle, airflow string
		reason          bool
	}{{bundle34, "3.4", true}, {bundle33, "3.3", false}, {bundle33, "3.4", false}} {
		sup := &supervisor.Supervisor{Executable: c.bundle, Airflow: c.airflow, Env: env}
		res, err := sup.RunTask(deadline.Context(t), supervisor.TaskRequest{DagID: selftestDag, TaskID: "fail", MaxTries: 1})
		if err != nil || res.State != supervisor.StateFailed || res.Terminal["type"] != "TaskState" {
			t.Fatalf("%s under %s: %v %s %v", c.bundle, c.airflow, err, res.State, res.Terminal)
		}
		_, has := res.Terminal["retry_reason"]
		if has != c.reason || (c.reason && !strings.Contains(res.RetryReason, "deliberate failure")) {
			t.Errorf("%s under Airflow %s: retry_reason present %v (%q), want %v", c.bundle, c.airflow, has, res.RetryReason, c.reason)
		}
	}
}
