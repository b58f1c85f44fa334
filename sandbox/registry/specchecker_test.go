package registry

import (
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// checkedConfig is a testConfig whose backend refuses images.
type checkedConfig struct{ testConfig }

func (checkedConfig) SpecProblems(spec driver.Spec) []driver.Problem {
	if spec.Image != "" {
		return []driver.Problem{{Field: "image", Msg: "this backend takes no image"}}
	}
	return nil
}

// A Config that offers static rules has them applied; one that does not
// refuses nothing by them.
func TestSpecProblemsAskTheConfigsOwnRules(t *testing.T) {
	spec := driver.Spec{Image: "python:3.12-slim"}
	ps := SpecProblems(checkedConfig{}, spec)
	if len(ps) != 1 || ps[0].String() != "image: this backend takes no image" {
		t.Fatalf("checked config: %v", ps)
	}
	if ps := SpecProblems(checkedConfig{}, driver.Spec{}); len(ps) != 0 {
		t.Fatalf("a spec within the rules: %v", ps)
	}
	if ps := SpecProblems(testConfig{}, spec); ps != nil {
		t.Fatalf("a config without rules: %v", ps)
	}
	if got := driver.JoinProblems(append([]driver.Problem(nil), driver.Problem{Field: "timeout", Msg: "too long"}, driver.Problem{Field: "cpu", Msg: "negative"}), map[string]string{"timeout": "lifetime"}); got != "lifetime: too long; cpu: negative" {
		t.Fatalf("JoinProblems renamed %q", got)
	}
}
