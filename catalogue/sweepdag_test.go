package catalogue

import (
	"slices"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/taskinfo"
)

// A sweep: section adds the maintenance Dag, alone or beside the config's
// own Dags; its task takes backends and storage and lets a run set dry_run
// only.
func TestSweepSectionAddsTheMaintenanceDag(t *testing.T) {
	for _, cfg := range []string{
		"sweep: {backends: [{backend: local}], storage: [\"file:///tmp/exports/\"], older_than: 1h}\n",
		"backends: {local: {ignore_image: true}}\nsweep: {backends: [{backend: local}]}\ndags: {d: {tasks: {t: {kind: destroy}}}}\n",
	} {
		b := bundles.New()
		if err := Load(b, []byte(cfg), "bundle.yaml"); err != nil {
			t.Fatalf("%s: %v", cfg, err)
		}
		var got []string
		for _, t := range taskinfo.Describe(b) {
			got = append(got, t.DagID+"."+t.TaskID)
		}
		if !slices.Contains(got, SweepDagID+"."+SweepTaskID) {
			t.Fatalf("%s registered %v, no %s.%s", cfg, got, SweepDagID, SweepTaskID)
		}
		fields := describeTask(b, SweepDagID, SweepTaskID).Inputs
		if f := strings.Join(fields, ","); !strings.Contains(f, "backends") || !strings.Contains(f, "dry_run") {
			t.Fatalf("inputs %v", fields)
		}
	}
}

func TestSweepSectionErrorsNameTheSpot(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"sweep: {}\n", "nothing to sweep"},
		{"sweep: {backends: [{backend: local, conn: x}]}\n", `"conn"`},
		{"sweep: {backend: local}\n", `"backend"`},
		{"sweep: {backends: [{backend: nosuch}]}\n", "nosuch"},
		{"sweep: {storage: [\"gs://bucket/exports\"]}\n", "gs://"},
		{"sweep: {backends: [{backend: local}]}\ndags: {" + SweepDagID + ": {tasks: {sweep: {kind: destroy}}}}\n", SweepDagID},
	} {
		err := Load(bundles.New(), []byte(c.yaml), "bundle.yaml")
		if err == nil || !strings.Contains(err.Error(), "bundle.yaml") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error naming bundle.yaml and %s", c.yaml, err, c.want)
		}
	}
}
