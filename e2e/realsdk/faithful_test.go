package realsdk_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/supervisor"
)

// Our supervisor (airflow-go-worker run, and every other e2e test) must
// behave as Airflow 3.3's: for the same task instances it must reach the
// same final state, see the same requests and answer them with replies of
// the same shape.
func TestOurSupervisorMatchesAirflow33(t *testing.T) {
	root := t.TempDir()
	worker := pack(t, root, "airflow-go-worker.bundle", workerBin)
	other := t.TempDir()
	tb := pack(t, other, "testbundle.bundle", bundleA)
	conn := map[string]any{"conn_type": "postgres", "host": "db.internal", "login": "etl", "password": "pw-7f3a9c", "port": 5432}

	type same struct {
		name, bundle, dag, task string
		conf                    map[string]any
		retry                   bool
		upstream                any // the "up" task's return_value, if any
		exit                    int
	}
	cases := []same{
		{name: "ping", bundle: worker, dag: selftestDag, task: "ping"},
		{name: "connection", bundle: worker, dag: selftestDag, task: "connection", conf: map[string]any{"conn_id": "warehouse"}},
		{name: "missing_connection", bundle: worker, dag: selftestDag, task: "connection", conf: map[string]any{"conn_id": "nope"}},
		{name: "missing_variable", bundle: worker, dag: selftestDag, task: "variable", conf: map[string]any{"key": "nope"}},
		{name: "xcom_roundtrip", bundle: worker, dag: selftestDag, task: "xcom_roundtrip"},
		{name: "fail", bundle: worker, dag: selftestDag, task: "fail"},
		{name: "retry", bundle: worker, dag: selftestDag, task: "fail", retry: true},
		{name: "unknown_task", bundle: worker, dag: selftestDag, task: "nope"},
		{name: "refused_conf", bundle: worker, dag: selftestDag, task: "ping", conf: map[string]any{"unrelated": 1}},
		{name: "xcom_binding", bundle: tb, dag: "bindings", task: "add", upstream: 41},
		{name: "missing_upstream", bundle: tb, dag: "bindings", task: "add"},
		{name: "succeed_then_crash", bundle: tb, dag: "bindings", task: "succeed_then_crash", exit: 3},
		{name: "succeed_then_crash_retry", bundle: tb, dag: "bindings", task: "succeed_then_crash", retry: true, exit: 3},
	}
	var tc []tcase
	for _, c := range cases {
		x := tcase{Name: c.name, Roots: []string{filepath.Dir(c.bundle)}, DagID: c.dag, TaskID: c.task, Conf: c.conf,
			MaxTries: 1, ShouldRetry: c.retry, Connections: map[string]any{"warehouse": conn}}
		if c.retry {
			x.MaxTries = 2
		}
		if c.upstream != nil {
			x.XComs = map[string]any{"up/return_value": c.upstream}
		}
		tc = append(tc, x)
	}
	real := runCases(t, tc)

	connJSON, _ := json.Marshal(conn)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := real[c.name]
			r.ranCleanExiting(t, c.exit)
			sup := &supervisor.Supervisor{
				Executable: c.bundle,
				Env:        append(os.Environ(), "AIRFLOW_CONN_WAREHOUSE="+string(connJSON)),
				StateDir:   t.TempDir(),
			}
			const run = "manual__2026-12-01T00:00:00+00:00"
			if c.upstream != nil {
				if err := sup.PutXCom(c.dag, run, "up", "return_value", c.upstream); err != nil {
					t.Fatal(err)
				}
			}
			ours, err := sup.RunTask(deadline.Context(t), supervisor.TaskRequest{DagID: c.dag, TaskID: c.task, RunID: run, Conf: c.conf, ShouldRetry: c.retry, MaxTries: 1})
			if err != nil {
				t.Fatal(err)
			}
			if ours.State != r.FinalState {
				t.Errorf("final state: ours %s, Airflow 3.3 %s", ours.State, r.FinalState)
			}
			if *r.ExitCode != ours.ExitCode {
				t.Errorf("exit code: ours %d, Airflow saw %d", ours.ExitCode, *r.ExitCode)
			}
			if got, want := strings.Join(ours.Requests, ","), strings.Join(r.requestTypes(), ","); got != want {
				t.Errorf("requests: ours saw %s, Airflow %s", got, want)
			}
			var realReplies []map[string]any
			if len(r.Replies) > 0 {
				realReplies = r.Replies[1:] // [0] is StartupDetails
			}
			if got, want := shapes(ours.Replies), shapes(realReplies); !slices.Equal(got, want) {
				t.Errorf("reply shapes:\n ours    %v\n Airflow %v", got, want)
			}
		})
	}
	// Airflow records the success it was told about, then the failure the
	// exit code decides: both state calls reach the API.
	r := real["succeed_then_crash"]
	calls := r.stateCalls()
	if len(calls) != 2 || calls[0]["state"] != "success" || calls[1]["state"] != "failed" || r.FinalState != "failed" {
		t.Fatalf("SucceedTask then exit 3: state calls %v, final %s", calls, r.FinalState)
	}
	if r := real["succeed_then_crash_retry"]; r.FinalState != "up_for_retry" {
		t.Fatalf("SucceedTask then exit 3 with retries left: final %s", r.FinalState)
	}
}

// shapes renders each reply as its type and sorted keys, and, for an
// ErrorResponse, its error code: what a runtime depends on.
func shapes(replies []map[string]any) []string {
	var out []string
	for _, r := range replies {
		s := keys(r)
		if r["type"] == "ErrorResponse" {
			s += " error=" + r["error"].(string)
			if d, ok := r["detail"].(map[string]any); ok {
				s += " detail=[" + keys(d) + "]"
			}
		}
		out = append(out, s)
	}
	return out
}

// The request types our supervisor knows Airflow 3.3 decodes are exactly
// the members of the installed task SDK's ToSupervisor union.
func TestRequestTypesMatchTheTaskSDK(t *testing.T) {
	out, err := exec.Command(pyenvPython(t), "-c", `
from airflow.sdk.execution_time.schema import _iter_model_types
from airflow.sdk.execution_time.comms import ToSupervisor
print(" ".join(sorted(m.__name__ for m in _iter_model_types(ToSupervisor))))
`).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(supervisor.AirflowRequestTypes(), " "), strings.TrimSpace(string(out)); got != want {
		t.Fatalf("our list of Airflow's request types:\n %s\nthe task SDK's:\n %s", got, want)
	}
}
