package catalogue

import (
	"fmt"
	"reflect"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/tasks"
)

// The maintenance Dag a bundle config's sweep: section adds. Its stub Dag
// (examples/maintenance/dag.py) runs it every few minutes, so sandboxes
// whose run ended without cleaning up (a worker killed mid-task, a broker
// outage that kept collect from ever starting, a bundle missing on one
// worker) go without anyone naming their runs.
const (
	SweepDagID  = "airflow_go_worker_sweep"
	SweepTaskID = "sweep"
)

// sweepConfHint is the refusal's advice for a conf key other than dry_run:
// the maintenance Dag has no dags: entry whose conf: could list it.
const sweepConfHint = "a run of the maintenance Dag may set only dry_run (whoever triggers it must not choose what is removed); " +
	"set its backends, storage, storage_conn_id and older_than in the bundle config's sweep: section (docs/cleanup.md)"

// registerSweepDag adds SweepDagID with the section as its task's defaults;
// each listed backend gets the bundle's backends: options under its own,
// as every sandbox task does. A run's dag_run.conf may set dry_run only.
func registerSweepDag(b *bundles.Bundle, section map[string]any, backends map[string]map[string]any) error {
	defaults := make(map[string]any, len(section))
	for k, v := range section {
		defaults[k] = v
	}
	if list, ok := section["backends"].([]any); ok && len(backends) > 0 {
		merged := make([]any, len(list))
		for i, e := range list {
			merged[i] = e
			if m, ok := e.(map[string]any); ok {
				merged[i] = withBackendDefaults(m, backends)
			}
		}
		defaults["backends"] = merged
	}
	k := adapt(tasks.SweepAll)
	if err := b.Add(SweepDagID, SweepTaskID, k.fn, bundles.WithDefaults(defaults), bundles.AllowConf("dry_run"), bundles.WithConfHint(sweepConfHint)); err != nil {
		return err
	}
	if err := checkDefaults(reflect.TypeFor[tasks.SweepAllInput](), defaults, nil); err != nil {
		return fmt.Errorf("%w (write sweep: {backends: [{backend: modal, conn_id: modal_default}], storage: [s3://bucket/prefix/]})", err)
	}
	return nil
}
