package e2e_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/supervisor"
	"github.com/airflow-sandbox/airflow-go-worker/testing/eventually"
)

const lifecycleConfig = `
dags:
  e2e_lifecycle:
    tasks:
      provision: {kind: provision, defaults: {backend: local, lifetime: 10m}, conf: [backend]}
      work: {kind: run, inputs: {sandbox: {xcom: provision}}, conf: [backend, command]}
      collect: {kind: collect, inputs: {sandbox: {xcom: provision}}, defaults: {backend: local, export_conn_id: aws_default}, conf: [backend, exports, max_bytes]}
`

func (w *world) lifecycleSupervisor() *supervisor.Supervisor {
	return w.configSupervisor("lifecycle.yaml", lifecycleConfig)
}

// configSupervisor forks the standard bundle with a bundle config the test
// writes.
func (w *world) configSupervisor(name, config string) *supervisor.Supervisor {
	cfg := filepath.Join(w.dir, name)
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		w.t.Fatal(err)
	}
	return w.supervisor(workerBin, cfg)
}

// provisionWith runs provision then a command in the sandbox, returning the id.
func (w *world) provisionWith(sup *supervisor.Supervisor, run, command string) string {
	w.t.Helper()
	w.runTask(sup, supervisor.TaskRequest{DagID: "e2e_lifecycle", TaskID: "provision", RunID: run}, supervisor.StateSuccess)
	id := w.xcom(sup, "e2e_lifecycle", run, "provision", "return_value").(string)
	if command != "" {
		w.runTask(sup, supervisor.TaskRequest{DagID: "e2e_lifecycle", TaskID: "work", RunID: run,
			Conf: map[string]any{"command": command}}, supervisor.StateSuccess)
	}
	return id
}

// A failure part-way through an export leaves no object at any destination,
// no staging object, and no sandbox.
func TestFailedExportLeavesNothing(t *testing.T) {
	w := newWorld(t, "local")
	sup := w.lifecycleSupervisor()
	cases := []struct {
		name    string
		exports map[string]any
		max     int
		wantLog string
	}{
		{
			name: "storage fails on the second file",
			exports: map[string]any{
				"a.txt": "s3://" + bucket + "/out/a.txt",
				"b.txt": "s3://no-such-bucket/out/b.txt",
			},
			wantLog: "no-such-bucket",
		},
		{
			name: "second file over the byte budget",
			exports: map[string]any{
				"a.txt":   "s3://" + bucket + "/out/a.txt",
				"big.bin": "s3://" + bucket + "/out/big.bin",
			},
			max:     1000,
			wantLog: "max_bytes",
		},
		{
			name: "second file missing",
			exports: map[string]any{
				"a.txt":  "s3://" + bucket + "/out/a.txt",
				"zz.txt": "s3://" + bucket + "/out/zz.txt",
			},
			wantLog: "does not exist",
		},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			run := "manual__export_failure_" + string(rune('a'+i))
			w.provisionWith(sup, run, "printf hello > a.txt; printf bye > b.txt; head -c 5000 /dev/zero > big.bin")
			conf := map[string]any{"exports": c.exports}
			if c.max > 0 {
				conf["max_bytes"] = c.max
			}
			before := len(w.logs.String())
			w.runTask(sup, supervisor.TaskRequest{DagID: "e2e_lifecycle", TaskID: "collect", RunID: run, Conf: conf}, supervisor.StateFailed)
			if log := w.logs.String()[before:]; !strings.Contains(log, c.wantLog) {
				t.Errorf("the task log does not explain the failure (%q):\n%s", c.wantLog, log)
			}
			if keys := w.keys(); len(keys) != 0 {
				t.Fatalf("the failed export left objects: %v", keys)
			}
			if alive := w.alive("local"); len(alive) != 0 {
				t.Fatalf("collect left %v alive after a failed export", alive)
			}
		})
	}
}

// A task killed mid-command leaves its sandbox behind; sweep finds it
// (dry run first) and removes it, and leaves a live run's sandbox alone.
func TestKilledTaskLeavesASandboxThatSweepRemoves(t *testing.T) {
	w := newWorld(t, "local")
	sup := w.lifecycleSupervisor()
	const killedRun, liveRun = "manual__killed", "manual__still_running"
	id := w.provisionWith(sup, killedRun, "")
	liveID := w.provisionWith(sup, liveRun, "")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan supervisor.Result, 1)
	go func() {
		res, _ := sup.RunTask(ctx, supervisor.TaskRequest{DagID: "e2e_lifecycle", TaskID: "work", RunID: killedRun,
			Conf: map[string]any{"command": "touch started; sleep 300"}})
		done <- res
	}()
	drv := w.localDriver()
	if !eventually.Holds(t, func() bool {
		_, err := drv.Stat(context.Background(), id, "/workspace/started")
		return err == nil
	}) {
		cancel()
		t.Fatalf("the command never started; logs:\n%s", w.logs.String())
	}
	cancel() // the worker is killed mid-command
	select {
	case res := <-done:
		if res.State == supervisor.StateSuccess {
			t.Fatalf("a killed task reported success")
		}
	case <-deadline.Context(t).Done():
		t.Fatal("the killed task did not end")
	}
	if alive := strings.Join(w.alive("local"), " "); !strings.Contains(alive, id) {
		t.Fatalf("the killed task's sandbox %s should still exist, alive: %s", id, alive)
	}

	sweep := func(args ...string) string {
		cmd := exec.Command(workerBin, append([]string{"sweep", "--backend", "local"}, args...)...)
		cmd.Env = w.env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("sweep %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := sweep("--dry-run", "--finished-run", "e2e_lifecycle/"+killedRun)
	if !strings.Contains(out, "would destroy "+id) || strings.Contains(out, liveID) {
		t.Fatalf("dry run output:\n%s", out)
	}
	if alive := strings.Join(w.alive("local"), " "); !strings.Contains(alive, id) {
		t.Fatal("a dry run destroyed the sandbox")
	}
	// Told no run id, sweep learns from the supervisor's records which runs
	// ended: the killed run failed, as Airflow would mark it; the other
	// still runs.
	out = sweep("--state", sup.StateDir)
	if strings.Contains(out, "destroyed "+id) {
		t.Fatalf("sweep removed the sandbox of a run the supervisor still records as running:\n%s", out)
	}
	if err := sup.SetDagRunState("e2e_lifecycle", killedRun, supervisor.DagRunFailed); err != nil {
		t.Fatal(err)
	}
	out = sweep("--state", sup.StateDir)
	if !strings.Contains(out, "destroyed "+id) || !strings.Contains(out, "reason=run ended (failed)") || !strings.Contains(out, "1 destroyed, 1 kept") {
		t.Fatalf("sweep output:\n%s", out)
	}
	if alive := w.alive("local"); len(alive) != 1 || alive[0] != liveID {
		t.Fatalf("after sweep alive = %v, want only the live run's %s", alive, liveID)
	}
}

// sweep reaches Modal through the connection file and removes only the
// finished run's sandboxes.
func TestSweepOnModal(t *testing.T) {
	w := newWorld(t, "modal")
	sup := w.lifecycleSupervisor()
	conf := map[string]any{"backend": "modal"}
	for _, run := range []string{"manual__over", "manual__running"} {
		w.runTask(sup, supervisor.TaskRequest{DagID: "e2e_lifecycle", TaskID: "provision", RunID: run, Conf: conf}, supervisor.StateSuccess)
	}
	over := w.xcom(sup, "e2e_lifecycle", "manual__over", "provision", "return_value").(string)
	running := w.xcom(sup, "e2e_lifecycle", "manual__running", "provision", "return_value").(string)
	cmd := exec.Command(workerBin, "sweep", "--backend", "modal", "--connections", w.connFile, "--finished-run", "e2e_lifecycle/manual__over")
	cmd.Env = w.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sweep: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "destroyed "+over) {
		t.Fatalf("sweep output:\n%s", out)
	}
	if alive := w.alive("modal"); len(alive) != 1 || alive[0] != running {
		t.Fatalf("after sweep alive = %v, want only %s", alive, running)
	}
}

// The sandbox dies while a file is streaming out of it: the export fails,
// the file staged before it is removed, the interrupted upload is aborted,
// and nothing lands at any destination.
func TestSandboxDyingMidExportLeavesNothing(t *testing.T) {
	w := newWorld(t, "modal")
	sup := w.lifecycleSupervisor()
	const run = "manual__dies_mid_export"
	conf := map[string]any{"backend": "modal"}
	w.runTask(sup, supervisor.TaskRequest{DagID: "e2e_lifecycle", TaskID: "provision", RunID: run, Conf: conf}, supervisor.StateSuccess)
	id := w.xcom(sup, "e2e_lifecycle", run, "provision", "return_value").(string)
	w.runTask(sup, supervisor.TaskRequest{DagID: "e2e_lifecycle", TaskID: "work", RunID: run,
		Conf: map[string]any{"backend": "modal", "command": "printf small > a.txt; head -c 134217728 /dev/zero > big.bin"}}, supervisor.StateSuccess)

	done := make(chan supervisor.Result, 1)
	go func() {
		res, _ := sup.RunTask(context.Background(), supervisor.TaskRequest{DagID: "e2e_lifecycle", TaskID: "collect", RunID: run,
			Conf: map[string]any{"backend": "modal", "max_bytes": 1 << 30, "exports": map[string]any{
				"a.txt": "s3://" + bucket + "/out/a.txt", "big.bin": "s3://" + bucket + "/out/big.bin"}}})
		done <- res
	}()
	// Kill the sandbox once big.bin's upload is under way.
	eventually.True(t, "big.bin's upload to start", func() bool {
		out, err := w.s3.Client().ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
		if err == nil && len(out.Uploads) > 0 {
			return true
		}
		select {
		case res := <-done:
			t.Fatalf("collect ended (%s) before big.bin's upload was seen; the test cannot interrupt it", res.State)
		default:
		}
		return false
	})
	if err := w.modal.KillSandbox(id); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		if res.State != supervisor.StateFailed {
			t.Fatalf("collect ended %s, want failed", res.State)
		}
	case <-deadline.Context(t).Done():
		t.Fatal("collect did not end after the sandbox died")
	}
	if keys := w.keys(); len(keys) != 0 {
		t.Fatalf("objects left after the interrupted export: %v", keys)
	}
	out, err := w.s3.Client().ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil || len(out.Uploads) != 0 {
		t.Fatalf("unfinished uploads left: %v, %v", out, err)
	}
	if alive := w.alive("modal"); len(alive) != 0 {
		t.Fatalf("sandboxes alive: %v", alive)
	}
}
