package realsdk_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/opensandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/fakeopensandbox"
)

// finalConfig has one standard task per class of error: each case below
// runs one of them with retries left.
const finalConfig = `
backends:
  local: {ignore_image: true}
dags:
  final_errors:
    tasks:
      refused_spec:       # a run asks local for a GPU: the spec is refused
        kind: provision
        defaults: {backend: local}
        conf: [gpu]
      binding_error:      # a run's value does not fit the input
        kind: provision
        defaults: {backend: local}
        conf: [memory_mib]
      bad_input:          # nothing to run
        kind: run
        defaults: {backend: local, sandbox: sb-1}
      missing_connection:
        kind: provision
        defaults: {backend: opensandbox, conn_id: nope}
      wrong_connection:   # a postgres connection for s3:// URLs
        kind: provision
        defaults: {backend: local, storage_conn_id: warehouse, stage_in: {in.csv: "s3://bucket/in.csv"}}
      execd_runtime_error: &run
        kind: run
        inputs: {sandbox: {xcom: provision}}
        defaults: {backend: opensandbox, command: "echo hi"}
      execd_unavailable: *run
`

// Errors retrying cannot fix end the task failed although Airflow has
// retries left (the supervisor records failed, not up_for_retry), one case
// per class: a refused spec, an input that does not bind, bad input, a
// missing connection, a connection of the wrong type, and a backend's
// deterministic answer (execd's 500 RUNTIME_ERROR). A transient error (a
// 503 from the same server) still asks Airflow to retry.
func TestFinalErrorsAreNotRetriedUnderAirflow33(t *testing.T) {
	srv := fakeopensandbox.Start(t, fakeopensandbox.Options{})
	const dag, run = "final_errors", "manual__2026-12-01T00:00:00+00:00"
	drv, err := opensandbox.New(opensandbox.Options{
		Config:       opensandbox.Config{Domain: srv.Domain, Protocol: "http", APIKey: srv.APIKey, RequestTimeout: 10 * time.Second, UseServerProxy: true},
		ReadyTimeout: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	ctx := deadline.Context(t)
	sb, err := sandbox.NewBackend(drv).Create(ctx, sandbox.Spec{Owner: sandbox.OwnerFor(dag, run)})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	// The two run tasks' commands, in case order: execd's deterministic
	// 500, then a 503 that may pass.
	srv.Inject(fakeopensandbox.RouteCommand, 1, fakeopensandbox.Fault{Status: http.StatusInternalServerError, Code: "RUNTIME_ERROR", Message: "no such session: 7f3a"})
	srv.Inject(fakeopensandbox.RouteCommand, 2, fakeopensandbox.Fault{Status: http.StatusServiceUnavailable})

	root := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "bundle.yaml")
	if err := os.WriteFile(cfg, []byte(finalConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	pack(t, root, "final.bundle", workerBin, "--config", cfg)
	host, port, _ := strings.Cut(srv.Domain, ":")
	var p int
	fmt.Sscan(port, &p)
	conns := map[string]any{
		"opensandbox_default": map[string]any{"conn_type": "opensandbox", "host": host, "port": p, "password": srv.APIKey},
		"warehouse":           map[string]any{"conn_type": "postgres", "host": "db.internal", "login": "etl", "password": "pw-7f3a9c"},
	}
	cases := []struct {
		task  string
		conf  map[string]any
		state string
		why   string // in the task log
	}{
		{"refused_spec", map[string]any{"gpu": "A10G"}, "failed", "the local backend cannot provide GPUs"},
		{"binding_error", map[string]any{"memory_mib": "lots"}, "failed", `input field "memory_mib"`},
		{"bad_input", nil, "failed", "nothing to run"},
		{"missing_connection", nil, "failed", `Airflow connection "nope", which does not exist`},
		{"wrong_connection", nil, "failed", `connection "warehouse" has type "postgres", not aws`},
		{"execd_runtime_error", nil, "failed", "no such session: 7f3a"},
		{"execd_unavailable", nil, "up_for_retry", "HTTP 503"},
	}
	var tc []tcase
	for _, c := range cases {
		tc = append(tc, tcase{Name: c.task, Roots: []string{root}, DagID: dag, TaskID: c.task, RunID: run, Conf: c.conf,
			MaxTries: 3, ShouldRetry: true, Connections: conns,
			XComs: map[string]any{"provision/return_value": sb.ID()}})
	}
	res := runCases(t, tc)
	for _, c := range cases {
		t.Run(c.task, func(t *testing.T) {
			r := res[c.task]
			r.ranClean(t)
			r.onlyState(t, c.state)
			if !r.logged(c.why) {
				t.Errorf("the task log does not give the reason %q: %v", c.why, r.Logs)
			}
			said := r.logged("not retried, since retrying cannot fix")
			if c.state == "failed" && !said {
				t.Errorf("the log does not say why the task is not retried: %v", r.Logs)
			}
			if c.state != "failed" && (said || !r.logged("Airflow will retry it")) {
				t.Errorf("the log must say Airflow retries the task: %v", r.Logs)
			}
		})
	}
}
