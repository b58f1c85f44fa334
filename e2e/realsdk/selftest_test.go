package realsdk_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

const selftestDag = "airflow_go_worker_selftest"

// Every self-test outcome of a bundle packed with default flags, run by
// Airflow 3.3.2's ExecutableCoordinator and supervisor.
func TestSelfTestUnderAirflow33(t *testing.T) {
	root := t.TempDir()
	pack(t, root, "airflow-go-worker.bundle", workerBin) // default flags: --airflow 3.3
	c := func(name, task string) tcase {
		return tcase{Name: name, Roots: []string{root}, DagID: selftestDag, TaskID: task, MaxTries: 1}
	}
	conn := c("connection", "connection")
	conn.Conf = map[string]any{"conn_id": "warehouse"}
	conn.Connections = map[string]any{"warehouse": map[string]any{"conn_type": "postgres", "host": "db.internal", "login": "etl", "password": "pw-7f3a9c", "port": 5432}}
	missing := c("missing_connection", "connection")
	missing.Conf = map[string]any{"conn_id": "nope"}
	variable := c("variable", "variable")
	variable.Conf = map[string]any{"key": "api_token"}
	variable.Variables = map[string]string{"api_token": "tok-123456"}
	noVariable := c("missing_variable", "variable")
	retry := c("retry", "fail")
	retry.MaxTries, retry.ShouldRetry = 2, true
	sleep := c("sigterm", "sleep")
	sleep.Conf = map[string]any{"seconds": 120}
	sleep.SigtermOnEvent = "sleeping"
	res := runCases(t, []tcase{c("ping", "ping"), conn, missing, variable, noVariable, c("xcom_roundtrip", "xcom_roundtrip"), c("fail", "fail"), retry, sleep, c("unknown_task", "no_such_task")})

	t.Run("success with a return_value XCom", func(t *testing.T) {
		r := res["ping"]
		r.ranClean(t)
		r.onlyState(t, "success")
		v, _ := r.xcomPosts()["ping/return_value"].(map[string]any)
		// The runtime reads its declared schema from its own footer.
		if v["supervisor_schema_version"] != "2026-06-16" || !strings.HasPrefix(v["go_version"].(string), "go1.") {
			t.Fatalf("ping return_value %v", v)
		}
		// Airflow sends no hostname in StartupDetails; the runtime fills in its own.
		if host, _ := os.Hostname(); host == "" || v["hostname"] != host {
			t.Errorf("ping returned hostname %v, want this host's %q", v["hostname"], host)
		}
		if got := strings.Join(r.requestTypes(), ","); got != "SetXCom,SucceedTask" {
			t.Fatalf("requests %s", got)
		}
		if !r.logged("pong") {
			t.Error("the bundle's log records did not reach the task log")
		}
	})
	t.Run("a connection served", func(t *testing.T) {
		r := res["connection"]
		r.ranClean(t)
		r.onlyState(t, "success")
		v, _ := r.xcomPosts()["connection/return_value"].(map[string]any)
		if v["host"] != "db.internal" || v["login"] != "etl" || v["port"] != float64(5432) || v["conn_type"] != "postgres" {
			t.Fatalf("connection return_value %v", v)
		}
		if got := strings.Join(r.requestTypes(), ","); got != "SetRenderedFields,GetConnection,MaskSecret,SetXCom,SucceedTask" {
			t.Fatalf("requests %s", got)
		}
		all, _ := json.Marshal(r.APICalls)
		if strings.Contains(string(all), "pw-7f3a9c") {
			t.Fatal("the password reached the Execution API (XCom or state)")
		}
		for _, l := range r.Logs {
			if b, _ := json.Marshal(l); strings.Contains(string(b), "pw-7f3a9c") {
				t.Fatalf("the password reached the task log: %s", b)
			}
		}
	})
	t.Run("a missing connection", func(t *testing.T) {
		r := res["missing_connection"]
		r.ranClean(t)
		r.onlyState(t, "failed")
		if len(r.xcomPosts()) != 0 {
			t.Fatalf("a failed task pushed %v", r.xcomPosts())
		}
		if !r.logged(`connection "nope"`) || !r.logged("connection not found") {
			t.Errorf("the task log does not name the missing connection: %v", r.Logs)
		}
	})
	t.Run("a variable", func(t *testing.T) {
		r := res["variable"]
		r.ranClean(t)
		r.onlyState(t, "success")
		v, _ := r.xcomPosts()["variable/return_value"].(map[string]any)
		if v["found"] != true || v["length"] != float64(len("tok-123456")) {
			t.Fatalf("variable return_value %v", v)
		}
		found := false
		for _, c := range r.APICalls {
			found = found || (c.Method == "GET" && c.Path == "variables/api_token")
		}
		if !found {
			t.Fatal("the variable was not read through the supervisor")
		}
		r = res["missing_variable"]
		r.ranClean(t)
		r.onlyState(t, "success")
		if v, _ := r.xcomPosts()["variable/return_value"].(map[string]any); v["found"] != false {
			t.Fatalf("a missing variable: %v (VARIABLE_NOT_FOUND must read as not found)", v)
		}
	})
	t.Run("an XCom written then read", func(t *testing.T) {
		r := res["xcom_roundtrip"]
		r.ranClean(t)
		r.onlyState(t, "success")
		pushed := r.xcomPosts()
		want := map[string]any{"hello": "airflow", "n": float64(42)}
		if b1, b2 := mustJSON(pushed["xcom_roundtrip/selftest_roundtrip"]), mustJSON(want); b1 != b2 {
			t.Fatalf("pushed %s, want %s", b1, b2)
		}
		if b1, b2 := mustJSON(pushed["xcom_roundtrip/return_value"]), mustJSON(want); b1 != b2 {
			t.Fatalf("read back %s, want %s", b1, b2)
		}
		if got := strings.Join(r.requestTypes(), ","); got != "SetRenderedFields,SetXCom,GetXCom,SetXCom,SucceedTask" {
			t.Fatalf("requests %s", got)
		}
	})
	t.Run("failure", func(t *testing.T) {
		r := res["fail"]
		r.ranClean(t)
		r.onlyState(t, "failed")
		if !r.logged("deliberate failure") {
			t.Error("the failure's reason is not in the task log")
		}
	})
	t.Run("retry with retries left", func(t *testing.T) {
		r := res["retry"]
		r.ranClean(t)
		body := r.onlyState(t, "up_for_retry")
		if reason, _ := body["retry_reason"].(string); !strings.Contains(reason, "deliberate failure") {
			t.Fatalf("retry_reason %v", body["retry_reason"])
		}
	})
	t.Run("SIGTERM mid-task", func(t *testing.T) {
		r := res["sigterm"]
		if !r.SigtermSent {
			t.Fatal("the task never logged sleeping, so no SIGTERM was sent")
		}
		r.ranClean(t)
		r.onlyState(t, "failed")
		if !r.logged("received a signal; cancelling the task") || !r.logged("sleep cancelled") {
			t.Errorf("the task log does not show the cancellation: %v", r.Logs)
		}
	})
	t.Run("an unknown task", func(t *testing.T) {
		r := res["unknown_task"]
		r.ranClean(t)
		r.onlyState(t, "removed")
	})
	t.Run("StartupDetails as Airflow sends it", func(t *testing.T) {
		startupShapeMatches(t, res["ping"])
	})
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
