package tasks

import (
	"context"
	"strings"
	"testing"
)

// A task with no sandbox bound says how to bind one both in a stub Dag and
// when run locally, where there is no stub call to pass it through.
func TestMissingSandboxSaysHowToBindIt(t *testing.T) {
	_, _, _, err := openRef(context.Background(), Deps{}, BackendOptions{}, SandboxRef{}, "")
	if err == nil {
		t.Fatal("want an error for an empty sandbox id")
	}
	for _, w := range []string{"collect(sandbox=provision())", `--conf '{"sandbox": "<id>"}'`} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}
