package e2e_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/supervisor"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/modal"
)

// driverFor opens the backend the way the attaching Python side would:
// with its own credentials, knowing nothing but the sandbox id.
func (w *world) driverFor(backend string) driver.Driver {
	w.t.Helper()
	if backend == "local" {
		return w.localDriver()
	}
	for k, v := range w.modal.Env() {
		w.t.Setenv(k, v)
	}
	d, err := modal.New(context.Background(), modal.Options{Credentials: modal.Credentials{TokenID: w.modal.TokenID(), TokenSecret: w.modal.TokenSecret()}})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { d.Close() })
	return d
}

// The handoff of examples/agent_handoff: Go provisions, a Python agent
// attaches by the XCom'd id and reads the tags, Go collects and destroys.
// The agent is played here by sandbox.Attach, which follows the Python
// provider's attach rules, reading only what Python reads.
func TestAgentHandoffExample(t *testing.T) {
	for _, backend := range []string{"local", "modal"} {
		t.Run(backend, func(t *testing.T) {
			w := newWorld(t, backend)
			w.putObject("incoming/orders.csv", ordersCSV)
			// The example pins its backend (Modal, which the Python agent
			// reaches); the test, as a Dag author, lets a run change it.
			sup := w.supervisor(workerBin, w.allowConf("../examples/agent_handoff/bundle.yaml",
				map[string][]string{"provision": {"backend"}, "collect": {"backend"}}))
			const dag, run = "sandbox_agent_handoff", "scheduled__2026-11-29T00:00:00+00:00"
			conf := backendConf(backend)
			before := time.Now()
			w.runTask(sup, supervisor.TaskRequest{DagID: dag, TaskID: "provision", RunID: run, Conf: conf}, supervisor.StateSuccess)

			// return_value is a bare JSON string: what attach_to renders.
			raw := w.xcom(sup, dag, run, "provision", "return_value")
			id, ok := raw.(string)
			if !ok || id == "" || id == "None" {
				t.Fatalf("return_value %#v is not a bare sandbox id string", raw)
			}
			// The structured record names the sandbox and carries no secret.
			recAny := w.xcom(sup, dag, run, "provision", "sandbox")
			recJSON, _ := json.Marshal(recAny)
			rec := recAny.(map[string]any)
			if rec["id"] != id || rec["backend"] != backend || rec["owner"] != dag+"/"+run || rec["workdir"] != "/workspace" {
				t.Fatalf("sandbox record %s", recJSON)
			}
			for _, secret := range []string{w.s3.SecretKey, "as-fakemodal", "password", "token"} {
				if strings.Contains(string(recJSON), secret) {
					t.Fatalf("the sandbox record carries %q: %s", secret, recJSON)
				}
			}

			// The agent's side: every tag Python reads, byte for byte.
			drv := w.driverFor(backend)
			tags, err := sandbox.NewBackend(drv).Open(id).Tags(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{
				"airflow_owner":   dag + "/" + run,
				"airflow_network": `{"allow_egress_to":[],"allow_egress_to_cidrs":[],"block_network":true}`,
				"airflow_workdir": "/workspace",
				"airflow_sandbox": rec["name"].(string),
				"team":            "analytics",
			}
			for k, v := range want {
				if tags[k] != v {
					t.Errorf("tag %s = %q, want %q", k, tags[k], v)
				}
			}
			if _, held := tags["airflow_holder"]; held {
				t.Error("a fresh sandbox must not be held")
			}
			exp, err := strconv.ParseInt(tags["airflow_expires_at"], 10, 64)
			if err != nil {
				t.Fatalf("airflow_expires_at %q is not unix seconds", tags["airflow_expires_at"])
			}
			if d := time.Unix(exp, 0).Sub(before); d < 2*time.Hour-time.Minute || d > 2*time.Hour+time.Minute {
				t.Errorf("airflow_expires_at is %v from provision, want the 2h lifetime", d)
			}
			if !strings.HasPrefix(rec["name"].(string), "airflow-sandbox-") || len(rec["name"].(string)) != len("airflow-sandbox-")+12 {
				t.Errorf("name %q is not airflow-sandbox-<12 hex>", rec["name"])
			}

			if backend == "modal" {
				// Interop rules for a sandbox Python attaches to: named
				// airflow-sandbox-<hex>, never an idle timeout (it would be
				// reclaimed while it waits between tasks), and a server-side
				// lifetime covering the whole handoff.
				creates := w.modal.Creates()
				def := creates[len(creates)-1].Definition
				if def.GetName() != rec["name"] || def.GetIdleTimeoutSecs() != 0 || def.GetTimeoutSecs() != 7200 {
					t.Errorf("Modal create: name %q, idle timeout %d, timeout %d; want %q, 0, 7200",
						def.GetName(), def.GetIdleTimeoutSecs(), def.GetTimeoutSecs(), rec["name"])
				}
			}

			holder := dag + "/" + run + "/analyse"
			sb, att, err := sandbox.NewBackend(drv).Attach(context.Background(), id, dag+"/"+run, holder)
			if err != nil {
				t.Fatalf("the agent cannot attach: %v", err)
			}
			if att.Workdir != "/workspace" || att.Network == nil || att.Network.Open || att.ExpiresAt.Unix() != exp {
				t.Fatalf("attachment %+v", att)
			}
			// The staged input is there, where the agent's prompt says.
			rc, _, err := sb.OpenFile(context.Background(), "orders.csv", 1<<20)
			if err != nil {
				t.Fatalf("staged input: %v", err)
			}
			rc.Close()
			if err := sb.WriteFile(context.Background(), "report.md", strings.NewReader("# Top customers\numbrella\n"), 0); err != nil {
				t.Fatal(err)
			}
			if _, _, err := sandbox.NewBackend(drv).Attach(context.Background(), id, "other_dag/other_run", "other_dag/other_run/x"); err == nil {
				t.Fatal("another Dag run attached to the sandbox")
			}
			if err := sandbox.NewBackend(drv).Release(context.Background(), id, holder); err != nil {
				t.Fatal(err)
			}

			// collect (a teardown) reads the handle from
			// provision's XCom through its inputs: binding, with no
			// arg_bindings, as on Airflow 3.3, which drops collect(sandbox=...).
			w.runTask(sup, supervisor.TaskRequest{DagID: dag, TaskID: "collect", RunID: run, Conf: conf}, supervisor.StateSuccess)
			if got, ok := w.getObject("reports/" + run + "/report.md"); !ok || got != "# Top customers\numbrella\n" {
				t.Fatalf("report.md in S3: %q, %v (bucket: %v)", got, ok, w.keys())
			}
			if alive := w.alive(backend); len(alive) != 0 {
				t.Fatalf("collect left %v alive", alive)
			}
		})
	}
}
