package tasks

import (
	"context"
	"strings"
	"testing"
)

// A task with no sandbox bound says how to bind one so that it works on
// every Airflow (3.3 drops the stub call's arguments) and under run.
func TestMissingSandboxSaysHowToBindIt(t *testing.T) {
	_, _, _, err := openRef(context.Background(), Deps{}, BackendOptions{}, SandboxRef{}, "")
	if err == nil {
		t.Fatal("want an error for an empty sandbox id")
	}
	for _, w := range []string{"inputs: {sandbox: {xcom: <provision task_id>}}", "collect(sandbox=provision())", "Airflow 3.4"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}
