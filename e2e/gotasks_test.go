package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/supervisor"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// examples/go_tasks: Go functions registered in their own main, values
// passed between them through XCom bindings, a sandbox used from Go, and a
// catalogue task (cleanup, the sweep kind) in the same bundle. Its main
// puts the sandboxes on Modal and lets no run move them, so it runs on the
// fake Modal server only, with an empty conf.
func TestGoTasksExample(t *testing.T) {
	const backend = "modal"
	w := newWorld(t, backend)
	w.putObject("incoming/orders.csv", ordersCSV)
	sup := w.supervisor(goTasksBin, "")
	const dag, run = "go_tasks_example", "manual__2026-12-02T10:00:00+00:00"
	w.runTask(sup, supervisor.TaskRequest{DagID: dag, TaskID: "fetch_orders", RunID: run}, supervisor.StateSuccess)
	// No arg_bindings, as on Airflow 3.3: the tasks read their
	// upstream's return_value through their WithXCom bindings.
	w.runTask(sup, supervisor.TaskRequest{DagID: dag, TaskID: "rank_customers", RunID: run}, supervisor.StateSuccess)
	w.runTask(sup, supervisor.TaskRequest{DagID: dag, TaskID: "publish_ranking", RunID: run}, supervisor.StateSuccess)

	// Keyed by run: PutObject fills the URL's {run_id}.
	if got := w.xcom(sup, dag, run, "publish_ranking", "return_value"); got != "s3://airflow-artifacts/reports/"+run+"/ranking.txt" {
		t.Fatalf("publish_ranking returned %v", got)
	}
	// acme 162.50, globex 90.75, initech 399.05, umbrella 999.99, hooli 250.
	if got, _ := w.getObject("reports/" + run + "/ranking.txt"); got != "umbrella\ninitech\nhooli\n" {
		t.Fatalf("ranking.txt = %q", got)
	}
	if alive := w.alive(backend); len(alive) != 0 {
		t.Fatalf("rank_customers left %v alive", alive)
	}

	// cleanup removes what this run left (a killed rank_customers'
	// sandbox), and nothing of another run.
	drv := w.driverFor(backend)
	ctx := context.Background()
	left, err := sandbox.NewBackend(drv).Create(ctx, sandbox.Spec{Owner: dag + "/" + run, Lifetime: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	other, err := sandbox.NewBackend(drv).Create(ctx, sandbox.Spec{Owner: dag + "/manual__other", Lifetime: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Destroy(ctx)
	w.runTask(sup, supervisor.TaskRequest{DagID: dag, TaskID: "cleanup", RunID: run}, supervisor.StateSuccess)
	if alive := w.alive(backend); len(alive) != 1 || alive[0] != other.ID() {
		t.Fatalf("after cleanup %v are alive; want only the other run's %s (this run's was %s)", alive, other.ID(), left.ID())
	}
}
