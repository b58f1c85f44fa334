package catalogue

import (
	"reflect"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/tasks"
)

// Every kind's input names the connections its task reads (package
// tasks, connids.go), so the runtime masks their secrets in the rendered
// fields and map index before the task runs (issue 38, item 1).
func TestEveryKindDeclaresItsConnections(t *testing.T) {
	user := reflect.TypeFor[interface{ ConnectionIDs() []string }]()
	kinds := map[string]taskKind{"airflow_go_worker_sweep": adapt(tasks.SweepAll)}
	for name, k := range taskKinds {
		kinds[name] = k
	}
	for name, k := range kinds {
		if !k.input.Implements(user) {
			t.Errorf("kind %s: input %s has no ConnectionIDs method", name, k.input)
		}
	}
}
