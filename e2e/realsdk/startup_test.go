package realsdk_test

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/supervisor"
)

// airflow33Schema is the supervisor schema version Airflow 3.3 (task SDK
// 1.3) knows, which the bundles these tests pack declare.
const airflow33Schema = "2026-06-16"

// startupShapeMatches compares the StartupDetails Airflow 3.3 sent (the
// first reply frame) with what our own supervisor sends for a bundle that
// declares 2026-06-16: the same keys at every level, so a runtime tested
// only against ours meets no surprise under Airflow.
func startupShapeMatches(t *testing.T, r *result) {
	t.Helper()
	if len(r.Replies) == 0 || r.Replies[0]["type"] != protocol.TypeStartupDetails {
		t.Fatalf("the first frame Airflow sent is not StartupDetails: %v", r.Replies)
	}
	body := supervisor.StartupBody(protocol.StartupDetails{
		TI:     protocol.TaskInstance{ID: "x", DagID: "d", TaskID: "t", RunID: "r", TryNumber: 1, MapIndex: -1, MaxTries: 1},
		DagRun: protocol.DagRun{DagID: "d", RunID: "r", RunAfter: time.Now()},
		// arg_bindings exist only from 2026-10-30: a 2026-06-16 startup has none.
		ArgBindings: []protocol.ArgBinding{{Name: "x", Kind: "literal", Value: 1}},
	}, airflow33Schema)
	ours, err := protocol.AsRaw(body)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range [][]string{nil, {"ti"}, {"bundle_info"}, {"ti_context"}, {"ti_context", "dag_run"}} {
		real, _ := at(r.Replies[0], path)
		mine, _ := at(ours, path)
		if got, want := keys(mine), keys(real); got != want {
			t.Errorf("StartupDetails%s: ours has keys [%s], Airflow 3.3 sends [%s]", "."+strings.Join(path, "."), got, want)
		}
	}
}

func at(m map[string]any, path []string) (map[string]any, bool) {
	for _, k := range path {
		next, ok := m[k].(map[string]any)
		if !ok {
			return nil, false
		}
		m = next
	}
	return m, true
}

func keys(m map[string]any) string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}
