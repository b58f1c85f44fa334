package catalogue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/selftest"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/taskinfo"
	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/tasks"
)

const sampleConfig = `
dags:
  sandbox_conversion:
    description: convert a document in a sandbox
    tasks:
      convert:
        kind: convert
        defaults:
          backend: local
          lifetime: 30m
          command: ["pandoc in.md -o out.html"]
          stage_in: {in.md: "s3://in/doc.md"}
          exports: {out.html: "s3://out/doc.html"}
          export_conn_id: aws_default
  agent_handoff:
    tasks:
      provision: {kind: provision, defaults: {backend: modal, lifetime: 7200, network: {block: true}}}
      collect: {kind: collect}
`

// describeTask is one task as the bundle's tools see it (zero when absent).
func describeTask(b *bundles.Bundle, dagID, taskID string) taskinfo.Task {
	for _, t := range taskinfo.Describe(b) {
		if t.DagID == dagID && t.TaskID == taskID {
			return t
		}
	}
	return taskinfo.Task{}
}

func TestLoadBundleConfigRegistersExactlyItsTasks(t *testing.T) {
	b := bundles.New()
	if err := Load(b, []byte(sampleConfig), "bundle.yaml"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, t := range taskinfo.Describe(b) {
		got = append(got, t.DagID+"."+t.TaskID)
	}
	// In file order: a whole-Dag `run` runs provision before collect.
	want := []string{"sandbox_conversion.convert", "agent_handoff.provision", "agent_handoff.collect"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("registered %v, want %v", got, want)
	}
	fields := describeTask(b, "sandbox_conversion", "convert").Inputs
	if !strings.Contains(strings.Join(fields, ","), "stage_in") {
		t.Fatalf("convert's inputs %v should include stage_in", fields)
	}
}

func TestLoadBundleConfigErrorsNameTheSpot(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown kind", `dags: {d: {tasks: {t: {kind: provison}}}}`, []string{"bundle.yaml", "dags.d.tasks.t", `"provison"`, "provision"}},
		{"missing kind", `dags: {d: {tasks: {t: {defaults: {}}}}}`, []string{"dags.d.tasks.t", "kind is missing"}},
		{"unknown default key", `dags: {d: {tasks: {t: {kind: run, defaults: {comand: ls}}}}}`, []string{"dags.d.tasks.t", `default "comand"`, "command"}},
		{"wrong default type", `dags: {d: {tasks: {t: {kind: provision, defaults: {cpu: lots}}}}}`, []string{"dags.d.tasks.t", `default "cpu"`, "lots"}},
		{"bad duration", `dags: {d: {tasks: {t: {kind: provision, defaults: {lifetime: soon}}}}}`, []string{"dags.d.tasks.t", `default "lifetime"`, "soon"}},
		{"misspelt nested key", `dags: {d: {tasks: {t: {kind: provision, defaults: {network: {blok: true}}}}}}`, []string{"dags.d.tasks.t", `default "network"`, `"blok"`, "block: true|false"}},
		{"embedded key binds", `dags: {d: {tasks: {t: {kind: convert, defaults: {backend: 7}}}}}`, []string{"dags.d.tasks.t", `default "backend"`}},
		{"unknown task key", `dags: {d: {tasks: {t: {kind: run, default: {}}}}}`, []string{`bundle.yaml: line 1: dags.d.tasks.t: unknown key "default" in a task; allowed: kind, defaults, inputs, conf, outlets, map_index, mapped_downstream`}},
		{"input names no field", `dags: {d: {tasks: {t: {kind: collect, inputs: {sandboxx: {xcom: provision}}}}}}`, []string{"dags.d.tasks.t", `input "sandboxx" (bound to {xcom: provision}) matches no input field`}},
		{"input with both sources", `dags: {d: {tasks: {t: {kind: collect, inputs: {sandbox: {xcom: p, param: s}}}}}}`, []string{"dags.d.tasks.t.inputs.sandbox", "give one of xcom, param"}},
		{"input key without xcom", `dags: {d: {tasks: {t: {kind: collect, inputs: {sandbox: {key: sandbox}}}}}}`, []string{"dags.d.tasks.t.inputs.sandbox", "needs xcom"}},
		{"empty input", `dags: {d: {tasks: {t: {kind: collect, inputs: {sandbox: {}}}}}}`, []string{"dags.d.tasks.t.inputs.sandbox", "{param: <name>}"}},
		{"unknown input key", `dags: {d: {tasks: {t: {kind: collect, inputs: {sandbox: {xcomm: p}}}}}}`, []string{`bundle.yaml: line 1: dags.d.tasks.t.inputs.sandbox: unknown key "xcomm" in an input binding; allowed: xcom, key, param, expand, mapped, asset_event, field, all`}},
		{"input not a mapping", `dags: {d: {tasks: {t: {kind: collect, inputs: {sandbox: provision}}}}}`, []string{`bundle.yaml: line 1: dags.d.tasks.t.inputs.sandbox: an entry of inputs is a mapping such as {xcom: <upstream task_id>} or {param: <name>}, not "provision"`}},
		{"conf names no field", `dags: {d: {tasks: {t: {kind: run, conf: [timeout, comand]}}}}`, []string{"dags.d.tasks.t", `conf lists "comand", which matches no input field`}},
		{"unknown dag key", "dags:\n  d:\n    taks: {t: {kind: run}}\n", []string{`bundle.yaml: line 3: dags.d: unknown key "taks" in a Dag; allowed: description, tasks`}},
		{"unknown top key", "dag: {}\n", []string{`bundle.yaml: line 1: unknown key "dag" at the top level; allowed: selftest, sweep, backends, dags`}},
		{"gpu on local", `dags: {d: {tasks: {t: {kind: provision, defaults: {gpu: A10G}}}}}`, []string{"dags.d.tasks.t.defaults", "gpu: the local backend cannot provide GPUs, which modal can"}},
		{"cidr allowlist on opensandbox", `dags: {d: {tasks: {t: {kind: convert, defaults: {backend: opensandbox, network: {allow_cidrs: [10.0.0.0/8]}}}}}}`, []string{"dags.d.tasks.t.defaults", "network.allow_cidrs: the opensandbox backend cannot provide CIDR allowlists (its egress sidecar"}},
		{"backend not linked", `dags: {d: {tasks: {t: {kind: run, defaults: {backend: kubernetes}}}}}`, []string{"dags.d.tasks.t.defaults", `backend "kubernetes" is not one this bundle links (local, modal, opensandbox)`}},
		{"misspelt backend option", `dags: {d: {tasks: {t: {kind: provision, defaults: {backend_options: {modal: {app_nme: x}}}}}}}`, []string{"dags.d.tasks.t.defaults", `backend_options.modal: unknown option "app_nme"`}},
		{"misspelt option in backends", "backends: {local: {ignore_imgae: true}}\ndags: {d: {tasks: {t: {kind: run}}}}\n", []string{"bundle.yaml: backends.local", `unknown option "ignore_imgae"`}},
		{"unknown backend in backends", "backends: {k8s: {}}\ndags: {d: {tasks: {t: {kind: run}}}}\n", []string{"backends.k8s", `backend "k8s" is not one this bundle links`}},
		{"bad option value", "backends: {modal: {egress_enforcement: loose}}\ndags: {d: {tasks: {t: {kind: run}}}}\n", []string{"backends.modal", `egress_enforcement: "loose" is not "strict" or "sni"`}},
		{"host allowlist needs sni on modal", `dags: {d: {tasks: {t: {kind: provision, defaults: {backend: modal, network: {allow_hosts: [pypi.org]}}}}}}`, []string{"network.allow_hosts: the modal backend cannot provide host allowlists"}},
		{"empty", "", []string{"bundle.yaml", "empty"}},
		{"no tasks", `dags: {d: {}}`, []string{"dags.d", "no tasks"}},
		{"bad dag id", `dags: {"bad id": {tasks: {t: {kind: run}}}}`, []string{"bad id", "dag_id"}},
		{"not yaml", "dags: [", []string{"bundle.yaml"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := bundles.New()
			err := Load(b, []byte(c.yaml), "bundle.yaml")
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// The bundle's backends: section reaches every task's backend_options,
// under the task's own options, and makes what it enables acceptable.
func TestBackendsSectionAppliesToEveryTask(t *testing.T) {
	y := `backends:
  modal: {egress_enforcement: sni, app_name: shared}
dags:
  d:
    tasks:
      p: {kind: provision, defaults: {backend: modal, network: {allow_hosts: [pypi.org]}, backend_options: {modal: {app_name: own}}}}
      c: {kind: collect}
`
	b := bundles.New()
	if err := Load(b, []byte(y), "bundle.yaml"); err != nil {
		t.Fatalf("sni from the backends section allows host allowlists on modal: %v", err)
	}
	merged := withBackendDefaults(map[string]any{"backend_options": map[string]any{"modal": map[string]any{"app_name": "own"}}},
		map[string]map[string]any{"modal": {"egress_enforcement": "sni", "app_name": "shared"}, "local": {"ignore_image": true}})
	got, _ := json.Marshal(merged)
	if want := `{"backend_options":{"local":{"ignore_image":true},"modal":{"app_name":"own","egress_enforcement":"sni"}}}`; string(got) != want {
		t.Fatalf("merged defaults %s, want %s", got, want)
	}
}

// The adapter must hand the task the identity of the running task instance,
// its client and its logger.
func TestAdaptPassesTheTaskInstance(t *testing.T) {
	var got tasks.Deps
	k := adapt(func(_ context.Context, d tasks.Deps, in tasks.DestroyInput) (string, error) {
		got = d
		return in.Sandbox.ID, nil
	})
	fn, ok := k.fn.(func(context.Context, bundles.TaskInstance, tasks.Airflow, hclog.Logger, *bundles.Outlets, tasks.DestroyInput) (string, error))
	if !ok {
		t.Fatalf("adapted function has type %T", k.fn)
	}
	af := &cliAirflow{}
	log := hclog.NewNullLogger()
	ti := bundles.TaskInstance{DagID: "d", RunID: "r", TaskID: "t", MapIndex: 3}
	out, err := fn(context.Background(), ti, af, log, nil, tasks.DestroyInput{Sandbox: tasks.SandboxRef{ID: "sb-1"}})
	if err != nil || out != "sb-1" {
		t.Fatalf("%q, %v", out, err)
	}
	if got.Run != (tasks.Run{DagID: "d", RunID: "r", TaskID: "t", MapIndex: 3}) || got.Airflow != af || got.Logger != log {
		t.Fatalf("deps %+v", got)
	}
	if k.input != reflect.TypeFor[tasks.DestroyInput]() {
		t.Fatalf("input type %v", k.input)
	}
}

func TestEveryKindRegisters(t *testing.T) {
	b := bundles.New()
	for name, k := range taskKinds {
		if err := b.Add("d", name, k.fn); err != nil {
			t.Errorf("kind %s: %v", name, err)
		}
	}
}

func TestExampleConfigsLoad(t *testing.T) {
	files, _ := filepath.Glob("../examples/*/bundle.yaml")
	if len(files) < 2 {
		t.Fatalf("want the agent handoff and conversion configs, found %v", files)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := Load(bundles.New(), data, f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestSweepCommandArguments(t *testing.T) {
	var out, errOut bytes.Buffer
	err := sweepCommand(context.Background(), []string{"extra"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), `"extra"`) {
		t.Fatalf("stray argument: %v", err)
	}
	errOut.Reset()
	if err := sweepCommand(context.Background(), []string{"-h"}, &out, &errOut); err != nil {
		t.Fatalf("-h is a request for the usage, not an error: %v", err)
	}
	if !strings.Contains(errOut.String(), "usage: airflow-go-worker sweep") {
		t.Fatalf("-h printed no usage: %q", errOut.String())
	}
	err = sweepCommand(context.Background(), []string{"--bogus"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "-bogus") || !strings.Contains(err.Error(), "sweep -h") {
		t.Fatalf("unknown flag: %v", err)
	}
	err = sweepCommand(context.Background(), []string{"--backend", "docker"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), `"docker"`) {
		t.Fatalf("bad backend: %v", err)
	}
	err = sweepCommand(context.Background(), []string{"--backend", "opensandbox", "--conn-id", "nope"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("missing connection: %v", err)
	}
	// Named by its flag, not the task's key, and refused before the
	// backend's connection (which does not exist) is looked up.
	err = sweepCommand(context.Background(), []string{"--backend", "opensandbox", "--conn-id", "nope", "--finished-run", "just_a_dag"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), `--finished-run "just_a_dag" is not of the form <dag_id>/<run_id>`) || strings.Contains(err.Error(), "nope") {
		t.Fatalf("malformed --finished-run: %v", err)
	}
}

func TestCLIAirflowReadsTheEnvironment(t *testing.T) {
	t.Setenv("AIRFLOW_VAR_GREETING", "hi")
	c := &cliAirflow{}
	if v, err := c.GetVariable(context.Background(), "greeting"); err != nil || v != "hi" {
		t.Fatalf("%q %v", v, err)
	}
	if _, err := c.GetConnection(context.Background(), "surely_missing_conn"); !errors.Is(err, connections.ErrNotFound) {
		t.Fatalf("a missing connection must be ErrNotFound: %v", err)
	}
}

func TestOnlyYAMLSourcesAreBundleConfigs(t *testing.T) {
	for name, want := range map[string]bool{
		"bundle.yaml": true, "conf/Bundle.YML": true, "main.go": false,
		"airflow-go-worker": false, "": false, "yaml": false,
	} {
		if got := isYAMLName(name); got != want {
			t.Errorf("isYAMLName(%q) = %v, want %v", name, got, want)
		}
	}
}

// A config bundle carries the self-test Dag only when the config asks.
func TestBundleConfigOptsIntoSelftest(t *testing.T) {
	for _, with := range []bool{false, true} {
		b := bundles.New()
		cfg := fmt.Sprintf("selftest: %v\ndags: {d: {tasks: {t: {kind: destroy}}}}\n", with)
		if err := Load(b, []byte(cfg), "bundle.yaml"); err != nil {
			t.Fatal(err)
		}
		var dags []string
		for _, t := range taskinfo.Describe(b) {
			if !slices.Contains(dags, t.DagID) {
				dags = append(dags, t.DagID)
			}
		}
		want := []string{"d"}
		if with {
			want = []string{selftest.DagID, "d"}
		}
		if !slices.Equal(dags, want) {
			t.Errorf("selftest: %v registered Dags %v, want %v", with, dags, want)
		}
	}
}

// The stub attributes a task declares reach its registration, and a bad
// one is refused naming the key.
func TestConfigDeclaresStubAttributes(t *testing.T) {
	b := bundles.New()
	err := Load(b, []byte(`dags:
  d:
    tasks:
      choose:
        kind: run
        execution_timeout: 20m
        branch: [load, report, join]
        branch_joins: {join: [load]}
      summary:
        kind: run
        execution_timeout: 90
        multiple_outputs: true
`), "bundle.yaml")
	if err != nil {
		t.Fatal(err)
	}
	choose, summary := describeTask(b, "d", "choose"), describeTask(b, "d", "summary")
	if choose.ExecutionTimeout != 20*time.Minute || !slices.Equal(choose.Branch, []string{"load", "report", "join"}) || !slices.Equal(choose.BranchJoins["join"], []string{"load"}) {
		t.Fatalf("choose: %+v", choose)
	}
	if summary.ExecutionTimeout != 90*time.Second || !summary.MultipleOutputs || summary.Branch != nil {
		t.Fatalf("summary: %+v", summary)
	}
	for yaml, want := range map[string]string{
		`execution_timeout: soon`:             `dags.d.tasks.t.execution_timeout: "soon" is neither a duration`,
		`branch: [a, a]`:                      `"a" is listed twice`,
		`branch: [a], branch_joins: {j: [a]}`: `branch join "j" is not one of`,
		`branch_joins: {j: [a]}`:              "needs a branch",
		`multiple_outputs: yes please`:        "multiple_outputs",
	} {
		err := Load(bundles.New(), []byte("dags: {d: {tasks: {t: {kind: run, "+yaml+"}}}}"), "bundle.yaml")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", yaml, err, want)
		}
	}
}

// A template input renders as the stub argument Airflow 3.3 drops.
func TestConfigTemplateInput(t *testing.T) {
	b := bundles.New()
	if err := Load(b, []byte(`dags: {d: {tasks: {t: {kind: run, inputs: {workdir: {template: "/work/{{ ds_nodash }}"}}}}}}`), "bundle.yaml"); err != nil {
		t.Fatal(err)
	}
	if got := describeTask(b, "d", "t").Templates["workdir"]; got != "/work/{{ ds_nodash }}" {
		t.Fatalf("templates: %q", got)
	}
	err := Load(bundles.New(), []byte(`dags: {d: {tasks: {t: {kind: run, inputs: {workdir: {template: "{{ macros.ds_add(ds, 1) }}"}}}}}}`), "bundle.yaml")
	if err == nil || !strings.Contains(err.Error(), "dags.d.tasks.t") || !strings.Contains(err.Error(), "not rendered for a Go task") {
		t.Fatalf("%v", err)
	}
}
