package e2e_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/supervisor"
)

// The standard bundle packed with a config lists exactly the config's tasks
// (plus the built-in selftest Dag) and runs them from the config it carries.
func TestPackedStandardBundleRunsItsEmbeddedConfig(t *testing.T) {
	w := newWorld(t, "local")
	w.putObject("incoming/orders.csv", ordersCSV)
	bundle := filepath.Join(w.dir, "conversion.bundle")
	// The example runs on Modal; the packed copy lets the run pick local.
	cfg := w.allowConf("../examples/conversion/bundle.yaml", map[string][]string{"convert": {"backend"}})
	out, err := exec.Command(workerBin, "pack", "--executable", workerBin, "--config", cfg, "--output", bundle).CombinedOutput()
	if err != nil {
		t.Fatalf("pack: %v\n%s", err, out)
	}
	meta, err := exec.Command(bundle, "--airflow-metadata", "--format", "json").Output()
	if err != nil {
		t.Fatalf("--airflow-metadata: %v", err)
	}
	m := string(meta)
	if !strings.Contains(m, `"sandbox_conversion"`) || !strings.Contains(m, `"convert"`) {
		t.Fatalf("manifest lacks the config's task:\n%s", m)
	}
	for _, foreign := range []string{"sandbox_agent_handoff", "provision", "collect"} {
		if strings.Contains(m, `"`+foreign+`"`) {
			t.Fatalf("manifest lists %q, which the packed config does not declare:\n%s", foreign, m)
		}
	}

	sup := w.supervisor(bundle, "") // no --bundle-config: the packed one is used
	w.runTask(sup, supervisor.TaskRequest{DagID: "sandbox_conversion", TaskID: "convert", RunID: "manual__packed", Conf: backendConf("local")}, supervisor.StateSuccess)
	if _, ok := w.getObject("converted/manual__packed/orders.jsonl"); !ok {
		t.Fatalf("the packed bundle's conversion wrote nothing; bucket: %v", w.keys())
	}
}
