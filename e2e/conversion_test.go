package e2e_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/supervisor"
)

const ordersCSV = `order_id,customer,amount,currency
1001,acme,120.50,EUR
1002,globex,75.00,EUR
1003,initech,310.25,EUR
1004,acme,42.00,EUR
1005,umbrella,999.99,EUR
1006,globex,15.75,EUR
1007,hooli,250.00,EUR
1008,initech,88.80,EUR
`

func TestConversionExample(t *testing.T) {
	for _, backend := range []string{"local", "modal", "opensandbox"} {
		t.Run(backend, func(t *testing.T) {
			w := newWorld(t, backend)
			w.putObject("incoming/orders.csv", ordersCSV)
			// The example runs on Modal and lets no run choose: the test,
			// as the Dag author of a copy, lets the run pick the backend
			// (and, for OpenSandbox, the connection).
			allow := []string{"backend"}
			if backend == "opensandbox" {
				allow = append(allow, "conn_id")
			}
			sup := w.supervisor(workerBin, w.allowConf("../examples/conversion/bundle.yaml", map[string][]string{"convert": allow}))
			// Run ids as Airflow makes them; each run writes under its own.
			run := "scheduled__2026-12-02T10:05:00+00:00"
			w.runTask(sup, supervisor.TaskRequest{DagID: "sandbox_conversion", TaskID: "convert", RunID: run, Conf: backendConf(backend)}, supervisor.StateSuccess)

			got, ok := w.getObject("converted/" + run + "/orders.jsonl")
			if !ok {
				t.Fatalf("converted/%s/orders.jsonl is missing; bucket holds %v", run, w.keys())
			}
			lines := strings.Split(strings.TrimSpace(got), "\n")
			if len(lines) != 8 || lines[0] != `{"order_id":"1001","customer":"acme","amount":"120.50","currency":"EUR"}` {
				t.Fatalf("converted output:\n%s", got)
			}
			if _, ok := w.getObject("converted/" + run + "/orders.jsonl.gz"); !ok {
				t.Fatal("converted/<run>/orders.jsonl.gz is missing")
			}
			for _, k := range w.keys() {
				if strings.HasSuffix(k, ".partial") {
					t.Errorf("staging object left behind: %s", k)
				}
			}
			res := w.xcom(sup, "sandbox_conversion", run, "convert", "return_value").(map[string]any)
			if urls, _ := res["urls"].([]any); len(urls) != 2 || !strings.Contains(res["output_tail"].(string), "converted 8 orders") {
				t.Fatalf("return_value %v", res)
			}
			if backend == "local" {
				// Another run, as a manual trigger names it: its outputs land
				// beside the first run's, which stay as they were.
				again := "manual__2026-12-02T10:06:30.123456+00:00"
				w.runTask(sup, supervisor.TaskRequest{DagID: "sandbox_conversion", TaskID: "convert", RunID: again, Conf: backendConf(backend)}, supervisor.StateSuccess)
				for _, r := range []string{run, again} {
					if _, ok := w.getObject("converted/" + r + "/orders.jsonl"); !ok {
						t.Errorf("after two runs, converted/%s/orders.jsonl is missing; bucket holds %v", r, w.keys())
					}
				}
			}
			if alive := w.alive(backend); len(alive) != 0 {
				t.Fatalf("sandboxes left alive: %v", alive)
			}
			if strings.Contains(w.logs.String(), w.s3.SecretKey) {
				t.Fatal("the S3 secret reached the task log")
			}
		})
	}
}

// Without a modal_default connection, the Modal backend falls back to the
// worker's own Modal credentials (MODAL_TOKEN_ID/MODAL_TOKEN_SECRET), as
// the Python provider's ModalHook does.
func TestModalFallsBackToEnvironmentCredentials(t *testing.T) {
	w := newWorld(t, "modal")
	delete(w.conns, "modal_default")
	w.writeConnections()
	w.env = append(w.env, "MODAL_TOKEN_ID="+w.modal.TokenID(), "MODAL_TOKEN_SECRET="+w.modal.TokenSecret())
	w.putObject("incoming/orders.csv", ordersCSV)
	sup := w.supervisor(workerBin, "../examples/conversion/bundle.yaml")
	w.runTask(sup, supervisor.TaskRequest{DagID: "sandbox_conversion", TaskID: "convert", RunID: "manual__env_creds"}, supervisor.StateSuccess)
	if _, ok := w.getObject("converted/manual__env_creds/orders.jsonl"); !ok {
		t.Fatal("nothing converted")
	}
	if !strings.Contains(w.logs.String(), "no modal_default connection") {
		t.Errorf("the fallback was not logged:\n%s", w.logs.String())
	}

	// Any other missing connection id is an error that names it.
	conf := map[string]any{"conn_id": "modal_prod"}
	sup = w.supervisor(workerBin, w.allowConf("../examples/conversion/bundle.yaml", map[string][]string{"convert": {"conn_id"}}))
	res := w.runTask(sup, supervisor.TaskRequest{DagID: "sandbox_conversion", TaskID: "convert", RunID: "manual__missing_conn", Conf: conf}, supervisor.StateFailed)
	if !strings.Contains(fmt.Sprint(res.LogLines), `needs Airflow connection "modal_prod", which does not exist`) {
		t.Errorf("the failure does not name the missing connection: %v", res.LogLines)
	}
}
