package e2e_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/supervisor"
)

// trustConfig is a provision -> run -> collect Dag as an author writes it:
// every value fixed in the config, the sandbox passed through XCom, and no
// input a run's dag_run.conf may set.
const trustConfig = `
dags:
  e2e_trust:
    tasks:
      provision: {kind: provision, defaults: {backend: local, lifetime: 10m}}
      work:
        kind: run
        inputs: {sandbox: {xcom: provision}}
        defaults: {backend: local, command: "echo working > out.txt"}
      collect:
        kind: collect
        inputs: {sandbox: {xcom: provision}}
        defaults: {backend: local, export_conn_id: aws_default, exports: {out.txt: "s3://airflow-artifacts/trust/out.txt"}}
`

// Issue 10, hole 1: whoever may trigger a Dag run used dag_run.conf to set
// any task input, reading host files into the log (stage_in), exfiltrating
// an unmapped connection's password (env_from), mounting a host directory
// as the sandbox root (image), opening the network, switching the backend
// or its connection, and acting on another run's sandbox (owner +
// sandbox). Each attack must now fail the task before anything runs,
// naming the key and how to allow it.
func TestConfCannotOverrideInputs(t *testing.T) {
	w := newWorld(t, "local")
	const secret = "host-secret-4b1d"
	secretFile := filepath.Join(w.dir, "host-secret.txt")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w.conns["other"] = map[string]any{"conn_type": "generic", "password": "unmapped-pw-77"}
	w.writeConnections()
	sup := w.configSupervisor("trust.yaml", trustConfig)
	const dag = "e2e_trust"

	refused := func(run, task string, conf map[string]any, keys ...string) {
		t.Helper()
		before := len(w.logs.String())
		res := w.runTask(sup, supervisor.TaskRequest{DagID: dag, TaskID: task, RunID: run, Conf: conf}, supervisor.StateFailed)
		log := w.logs.String()[before:]
		for _, k := range keys {
			if !strings.Contains(log, `\"`+k+`\"`) && !strings.Contains(log, `"`+k+`"`) {
				t.Errorf("%s with conf %v: the log does not name key %q:\n%s", task, conf, k, log)
			}
		}
		if !strings.Contains(log, "conf: [") || !strings.Contains(log, "dags."+dag+".tasks."+task) {
			t.Errorf("%s with conf %v: the log does not say how to allow the key:\n%s", task, conf, log)
		}
		for _, leaked := range []string{secret, "unmapped-pw-77"} {
			if strings.Contains(log, leaked) || strings.Contains(strings.Join(res.Output, "\n"), leaked) {
				t.Errorf("%s with conf %v leaked %q", task, conf, leaked)
			}
		}
		for _, r := range res.Requests {
			if r != "TaskState" {
				t.Errorf("%s with conf %v sent %s before failing; nothing may run", task, conf, r)
			}
		}
	}

	for i, conf := range []map[string]any{
		{"stage_in": map[string]any{"s": "file:///etc/shadow"}},
		{"stage_in": map[string]any{"s": "file://" + secretFile}},
		{"env_from": map[string]any{"X": map[string]any{"connection": "other"}}},
		{"image": "/usr"},
		{"network": map[string]any{"block": false}},
		{"backend": "modal"},
		{"conn_id": "other"},
	} {
		var keys []string
		for k := range conf {
			keys = append(keys, k)
		}
		refused("manual__attack_"+string(rune('a'+i)), "provision", conf, keys...)
	}
	if alive := w.alive("local"); len(alive) != 0 {
		t.Fatalf("a refused provision created sandboxes %v", alive)
	}

	// Another run's sandbox: a legitimate run provisions it, the attacker's
	// run points its tasks at it.
	const victim = "manual__victim"
	w.runTask(sup, supervisor.TaskRequest{DagID: dag, TaskID: "provision", RunID: victim}, supervisor.StateSuccess)
	victimID := w.xcom(sup, dag, victim, "provision", "return_value").(string)
	outside := filepath.Join(w.dir, "written-by-attacker")
	steal := map[string]any{"owner": dag + "/" + victim, "sandbox": victimID}
	refused("manual__attacker", "work", map[string]any{"owner": steal["owner"], "sandbox": victimID, "command": "cat /etc/hostname"}, "owner", "sandbox", "command")
	refused("manual__attacker", "collect", map[string]any{"owner": steal["owner"], "sandbox": victimID, "exports": map[string]any{"out.txt": "file://" + outside}}, "owner", "sandbox", "exports")
	if _, err := os.Stat(outside); err == nil {
		t.Fatal("a refused collect wrote outside the sandbox")
	}
	if alive := w.alive("local"); len(alive) != 1 || alive[0] != victimID {
		t.Fatalf("the victim's sandbox must be untouched and alone, alive: %v", alive)
	}

	// The legitimate run still works end to end, with conf keys that name
	// no input (another task's, say) ignored.
	w.runTask(sup, supervisor.TaskRequest{DagID: dag, TaskID: "work", RunID: victim, Conf: map[string]any{"unrelated": 1}}, supervisor.StateSuccess)
	w.runTask(sup, supervisor.TaskRequest{DagID: dag, TaskID: "collect", RunID: victim}, supervisor.StateSuccess)
	if got, ok := w.getObject("trust/out.txt"); !ok || got != "working\n" {
		t.Fatalf("the legitimate run's export: %q %v", got, ok)
	}
	if alive := w.alive("local"); len(alive) != 0 {
		t.Fatalf("collect left %v", alive)
	}
}
