package e2e_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/supervisor"
)

// A secret mapped into the sandbox with env_from reaches the sandbox, but
// neither the task logs, nor XCom, nor the sandbox tags, in the provisioning
// task or a later one whose command prints it.
func TestEnvFromSecretsStayOutOfLogsAndXCom(t *testing.T) {
	w := newWorld(t, "local")
	const secret = "sk-live-0123456789abcdef"
	w.conns["payments_api"] = map[string]any{"conn_type": "http", "host": "api.example.com", "password": secret}
	w.writeConnections()
	// The Dag author maps the secret in; a run cannot (see trust_conf_test.go).
	sup := w.configSupervisor("secrets.yaml", strings.Replace(lifecycleConfig, "defaults: {backend: local, lifetime: 10m}",
		"defaults: {backend: local, lifetime: 10m, env_from: {PAYMENTS_TOKEN: {connection: payments_api}}}", 1))
	const run = "manual__secrets"
	w.runTask(sup, supervisor.TaskRequest{DagID: "e2e_lifecycle", TaskID: "provision", RunID: run}, supervisor.StateSuccess)
	w.runTask(sup, supervisor.TaskRequest{DagID: "e2e_lifecycle", TaskID: "work", RunID: run,
		Conf: map[string]any{"command": `test -n "$PAYMENTS_TOKEN" && echo "token=$PAYMENTS_TOKEN" && echo "len=${#PAYMENTS_TOKEN}"`}}, supervisor.StateSuccess)

	logs := w.logs.String()
	if strings.Contains(logs, secret) {
		t.Fatalf("the secret reached the task logs:\n%s", logs)
	}
	if !strings.Contains(logs, "len=24") {
		t.Fatalf("the sandbox did not receive the secret (want len=24 in the output):\n%s", logs)
	}
	for _, task := range []string{"provision", "work"} {
		for _, key := range []string{"return_value", "sandbox"} {
			v, ok, _ := sup.GetXCom("e2e_lifecycle", run, task, key)
			if !ok {
				continue
			}
			b, _ := json.Marshal(v)
			if strings.Contains(string(b), secret) {
				t.Fatalf("XCom %s of %s carries the secret: %s", key, task, b)
			}
		}
	}
	id := w.xcom(sup, "e2e_lifecycle", run, "provision", "return_value").(string)
	tail := w.xcom(sup, "e2e_lifecycle", run, "work", "return_value").(map[string]any)["output_tail"].(string)
	if !strings.Contains(tail, "token=***") {
		t.Fatalf("output_tail %q: want the secret redacted, the rest kept", tail)
	}
	tags, err := w.localDriver().Tags(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range tags {
		if strings.Contains(v, secret) {
			t.Fatalf("tag %s carries the secret", k)
		}
	}
}
