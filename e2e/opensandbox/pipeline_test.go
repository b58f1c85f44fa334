//go:build opensandbox_e2e

package opensandbox

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"
)

// pipelineConfig is a bundle config whose Dag provisions a sandbox on the
// server (staging a file in), totals it there, exports the result and
// destroys the sandbox: the standard binary's four sandbox task kinds.
const pipelineConfig = `dags:
  e2e_opensandbox:
    tasks:
      provision:
        kind: provision
        defaults:
          backend: opensandbox
          image: %[1]s
          lifetime: 10m
          stage_in: {orders.csv: "file://%[2]s/in/orders.csv"}
      run:
        kind: run
        inputs: {sandbox: {xcom: provision}}
        defaults:
          backend: opensandbox
          command: "awk -F, 'NR > 1 { t[$1] += $2 } END { for (c in t) printf \"%%s,%%d\\n\", c, t[c] }' orders.csv | sort > totals.csv"
      export:
        kind: export
        inputs: {sandbox: {xcom: provision}}
        defaults:
          backend: opensandbox
          exports: {totals.csv: "file://%[2]s/out/{run_id}/totals.csv"}
      destroy:
        kind: destroy
        inputs: {sandbox: {xcom: provision}}
        defaults:
          backend: opensandbox
`

// The standard binary (built as make build EXTRAS=opensandbox builds it)
// runs provision -> run -> export -> destroy against the server through
// its own supervisor (the run command), with the opensandbox_default
// connection naming the server.
func TestStandardBinaryPipeline(t *testing.T) {
	d := deploymentFromEnv(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "airflow-go-worker")
	build := exec.Command("go", "build", "-tags", "backend_opensandbox", "-o", bin, "../../cmd/airflow-go-worker")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the standard binary: %v\n%s", err, out)
	}
	mustWrite(t, filepath.Join(dir, "in", "orders.csv"), "customer,amount\nacme,12\nglobex,5\nacme,30\n")
	config := filepath.Join(dir, "bundle.yaml")
	mustWrite(t, config, fmt.Sprintf(pipelineConfig, d.image, dir))
	host, port, _ := strings.Cut(d.domain, ":")
	conns, _ := json.Marshal(map[string]any{"opensandbox_default": map[string]any{
		"conn_type": "opensandbox", "host": host, "port": atoi(t, port), "password": d.apiKey,
	}})
	connFile := filepath.Join(dir, "connections.json")
	mustWrite(t, connFile, string(conns))

	drv := d.newDriver(t, true, nil)
	before := liveSandboxes(t, drv)
	runID := "manual__2026-12-07T00:00:00+00:00"
	cmd := exec.Command(bin, "--bundle-config", config, "run", "--dag", "e2e_opensandbox", "--run-id", runID, "--connections", connFile)
	cmd.Env = append(os.Environ(), "AIRFLOW_GO_WORKER_FILE_ROOTS="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run --dag e2e_opensandbox: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(dir, "out", runID, "totals.csv"))
	if err != nil || string(got) != "acme,42\nglobex,5\n" {
		t.Fatalf("exported totals.csv = %q (%v); the run said:\n%s", got, err, out)
	}
	if after := liveSandboxes(t, drv); after != before {
		t.Errorf("%d sandboxes before the Dag, %d after its destroy task", before, after)
	}
	// The run was the sandbox's owner: none of its sandboxes is left.
	left, err := sandbox.NewBackend(drv).List(deadline.Context(t), map[string]string{sandbox.TagOwner: "e2e_opensandbox/" + runID})
	if err != nil || len(left) != 0 {
		t.Errorf("sandboxes of the run left: %v (%v)", left, err)
	}
}

func mustWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("port %q: %v", s, err)
	}
	return n
}
