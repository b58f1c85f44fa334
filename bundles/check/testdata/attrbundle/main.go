// Command attrbundle is the Go side of testdata/attributes/attributes.py
// for check's tests: each Dag's tasks declare the stub attributes, input
// bindings, defaults and branches that its stubs match or miss, one
// mistake per task.
package main

import (
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/cli"
)

type argsIn struct {
	Sandbox string `json:"sandbox"`
	N       int    `json:"n"`
	Label   string `json:"label"`
}

type paramsIn struct {
	N     int    `json:"n"`
	Label string `json:"label"`
	Req   string `json:"req"`
}

func value() (string, error) { return "v", nil }

func nothing() error { return nil }

func keys() (map[string]int, error) { return map[string]int{"a": 1}, nil }

func args(in argsIn) (string, error) { return in.Sandbox, nil }

func params(in paramsIn) (int, error) { return in.N, nil }

func main() {
	b := bundles.New()
	timeouts(b)
	runnerOnly(b)
	arguments(b)
	paramDefaults(b)
	outputs(b)
	branches(b)
	plain(b)
	cli.Main(b)
}

func timeouts(b *bundles.Bundle) {
	b.Register("at_timeout", "timeout_stub_only", value)
	b.Register("at_timeout", "timeout_go_only", value, bundles.WithExecutionTimeout(20*time.Second))
	b.Register("at_timeout", "timeout_differs", value, bundles.WithExecutionTimeout(20*time.Second))
	b.Register("at_timeout", "timeout_same", value, bundles.WithExecutionTimeout(90*time.Second))
}

func runnerOnly(b *bundles.Bundle) {
	for _, task := range []string{"cb_function", "cb_notifier", "emails", "emails_off", "hooks", "run_as", "named_map"} {
		b.Register("at_runner", task, value)
	}
}

func arguments(b *bundles.Bundle) {
	n5 := bundles.WithDefaults(map[string]any{"n": 5})
	b.Register("at_args", "up", value)
	b.Register("at_args", "arg_bound", args, bundles.WithXCom("sandbox", "up"))
	b.Register("at_args", "arg_keyed", args, bundles.WithXCom("sandbox", "up"))
	b.Register("at_args", "arg_literal_same", args, n5)
	b.Register("at_args", "arg_literal_other", args, n5)
	b.Register("at_args", "arg_template", args)
	b.Register("at_args", "arg_template_same", args, bundles.WithTemplate("label", "rates-{{ ds }}"))
	b.Register("at_args", "arg_template_macro", args)
	b.Register("at_args", "arg_unbound", args)
	b.Register("at_args", "arg_positional", args, bundles.WithXCom("sandbox", "up"))
	b.Register("at_args", "arg_function_default", args, n5)
	b.Register("at_args", "arg_no_input", args)
}

func paramDefaults(b *bundles.Bundle) {
	b.Register("at_params", "p_same", params, bundles.WithParam("n", "n"), bundles.WithDefaults(map[string]any{"n": 5}))
	b.Register("at_params", "p_none", params, bundles.WithParam("label", "label"))
	b.Register("at_params", "p_other", params, bundles.WithParam("label", "label"), bundles.WithDefaults(map[string]any{"label": "y"}))
	b.Register("at_params", "p_required", params, bundles.WithParam("req", "req"))
	b.Register("at_params", "p_task_override", params, bundles.WithParam("n", "n"), bundles.WithDefaults(map[string]any{"n": 5}))
}

func outputs(b *bundles.Bundle) {
	b.Register("at_outputs", "mo_stub_only", keys)
	b.Register("at_outputs", "mo_go_only", keys, bundles.WithMultipleOutputs())
	b.Register("at_outputs", "mo_same", keys, bundles.WithMultipleOutputs())
	b.Register("at_outputs", "mo_inferred", keys)
	b.Register("at_outputs", "push_off_value", value)
	b.Register("at_outputs", "push_off_nothing", nothing)
}

func branches(b *bundles.Bundle) {
	b.Register("at_branch", "br_missing", value, bundles.WithBranch("a1", "b1"))
	b.Register("at_branch", "br_join", value, bundles.WithBranch("a2", "j2"))
	b.Register("at_branch", "br_ok", value, bundles.WithBranch("a3", "j3"), bundles.WithBranchJoin("j3", "a3"))
	b.Register("at_branch", "br_group", value, bundles.WithBranch("grp.g1", "z4"))
}

func plain(b *bundles.Bundle) {
	b.Register("at_plain", "setup", value)
	b.Register("at_plain", "plain", value, bundles.WithOutlets(bundles.Asset{Name: "plain_out", URI: "s3://b/plain"}))
	b.Register("at_plain", "mapped", args, bundles.WithExpandItems("n", 1, 2))
	b.Register("at_plain", "teardown", nothing)
}
