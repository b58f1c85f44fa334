package check

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/schema"
	"github.com/airflow-sandbox/airflow-go-worker/testing/pyenv"
)

// checkAttributes checks testdata/attributes against the bundle of
// testdata/attrbundle, routed as a deployment routes it: Airflow's plain
// ExecutableCoordinator from [sdk] settings, no --queue. extraEnv adds
// Airflow settings.
func checkAttributes(t *testing.T, extraEnv ...string) (Report, string) {
	t.Helper()
	python := pyenv.Python(t)
	bin := build(t, "bundles/check/testdata/attrbundle", "")
	roots := t.TempDir()
	pack(t, bin, "", filepath.Join(roots, "attr.bundle"))
	dags, err := filepath.Abs("testdata/attributes")
	if err != nil {
		t.Fatal(err)
	}
	env := append(airflowEnv(t, goCoordinator(roots), `{"golang": "go"}`), extraEnv...)
	r, err := Run(context.Background(), Options{Dags: []string{dags}, Python: python, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range r.Findings {
		t.Logf("%s", f)
	}
	// Every stub is checked (the plain ones included), or no finding
	// would prove nothing.
	if r.Dags != 7 || r.GoTasks != 42 || len(r.Bundles) != 1 {
		t.Fatalf("parsed %d Dags, %d Go tasks against bundles %v; want the 7 Dags of attributes.py, their 42 stubs and one bundle", r.Dags, r.GoTasks, r.Bundles)
	}
	return r, filepath.Join(dags, "attributes.py")
}

// What Airflow applies to a task in its Python task runner, and never
// hands a Go task, is compared with what the Go side declares, or refused
// when nothing on the Go side can do it: each mistake once, named by
// file, Dag and task, the attribute in the problem and what to write in
// the fix. The stubs the Go side matches, and a plain stub with all the
// scheduler applies itself (Dag at_plain), raise nothing.
func TestCheckComparesStubAttributes(t *testing.T) {
	r, file := checkAttributes(t)
	want := []found{
		{"attribute_mismatch", "at_outputs", "mo_go_only"},
		{"attribute_mismatch", "at_outputs", "mo_inferred"},
		{"attribute_mismatch", "at_outputs", "mo_stub_only"},
		{"attribute_mismatch", "at_outputs", "push_off_value"},
		{"attribute_mismatch", "at_timeout", "timeout_differs"},
		{"attribute_mismatch", "at_timeout", "timeout_go_only"},
		{"attribute_mismatch", "at_timeout", "timeout_stub_only"},
		{"branch_mismatch", "at_branch", "br_join"},
		{"branch_mismatch", "at_branch", "br_missing"},
		{"not_run_for_go_task", "at_runner", "cb_function"},
		{"not_run_for_go_task", "at_runner", "cb_notifier"},
		{"not_run_for_go_task", "at_runner", "emails"},
		{"not_run_for_go_task", "at_runner", "hooks"},
		{"not_run_for_go_task", "at_runner", "hooks"},
		{"not_run_for_go_task", "at_runner", "named_map"},
		{"not_run_for_go_task", "at_runner", "run_as"},
		{"param_default_mismatch", "at_params", "p_none"},
		{"param_default_mismatch", "at_params", "p_other"},
		{"param_default_mismatch", "at_params", "p_task_override"},
		{"stub_argument_dropped", "at_args", "arg_function_default"},
		{"stub_argument_dropped", "at_args", "arg_keyed"},
		{"stub_argument_dropped", "at_args", "arg_literal_other"},
		{"stub_argument_dropped", "at_args", "arg_no_input"},
		{"stub_argument_dropped", "at_args", "arg_positional"},
		{"stub_argument_dropped", "at_args", "arg_template"},
		{"stub_argument_dropped", "at_args", "arg_template_macro"},
		{"stub_argument_dropped", "at_args", "arg_unbound"},
	}
	if got := kinds(r); !slices.Equal(got, want) {
		t.Fatalf("findings\n got %v\nwant %v", got, want)
	}
	if len(r.Notes) != 0 {
		t.Errorf("notes %v, want none", r.Notes)
	}
	// task -> what its problem and its fix must say.
	says := map[string][2][]string{
		"timeout_stub_only":    {{"execution_timeout 20s", "nothing enforces it"}, {"execution_timeout: 20s under dags.at_timeout.tasks.timeout_stub_only", "bundles.WithExecutionTimeout(20 * time.Second)"}},
		"timeout_go_only":      {{"after 20s", "sets no execution_timeout"}, {"execution_timeout=timedelta(seconds=20)"}},
		"timeout_differs":      {{"execution_timeout 30s", "after 20s"}, {"execution_timeout: 30s", "WithExecutionTimeout(30 * time.Second)"}},
		"mo_stub_only":         {{"multiple_outputs", "only return_value"}, {"multiple_outputs: true under dags.at_outputs.tasks.mo_stub_only", "bundles.WithMultipleOutputs()"}},
		"mo_inferred":          {{"multiple_outputs"}, {"multiple_outputs: true"}},
		"mo_go_only":           {{"multiple_outputs"}, {"multiple_outputs=True on the stub"}},
		"push_off_value":       {{"do_xcom_push=False", "returns a value"}, {"do_xcom_push", "return only error"}},
		"cb_function":          {{"on_failure_callback (page_someone) never runs"}, {"@dag(on_failure_callback="}},
		"cb_notifier":          {{"on_success_callback (notifier PageNotifier) never runs"}, {"@dag(on_success_callback="}},
		"emails":               {{"email ops@example.com", "email_on_failure", "email_on_retry"}, {"on_failure_callback"}},
		"named_map":            {{`map_index_template "{{ task.task_id }}"`}, {"map_index:", "bundles.WithMapIndexTemplate"}},
		"run_as":               {{"run_as_user nobody"}, {"remove run_as_user"}},
		"arg_template":         {{`label="rates-{{ ds }}"`, "template"}, {`inputs: {label: {template: "rates-{{ ds }}"}}`, `bundles.WithTemplate("label", "rates-{{ ds }}")`}},
		"arg_template_macro":   {{`label="{{ macros.ds_add(ds, 1) }}"`}, {"not this (filters, macros or statements)", "DagRun"}},
		"arg_unbound":          {{"sandbox=up()", "no arg_bindings"}, {"inputs: {sandbox: {xcom: up}} under dags.at_args.tasks.arg_unbound", `bundles.WithXCom("sandbox", "up")`}},
		"arg_keyed":            {{`sandbox=up()["id"]`, "XCom return_value of up instead"}, {"inputs: {sandbox: {xcom: up, key: id}}"}},
		"arg_literal_other":    {{"n=6", "default n=5"}, {"defaults: {n: 6}", `bundles.WithDefaults(map[string]any{"n": 6})`}},
		"arg_function_default": {{"default n=7"}, {"defaults: {n: 7}"}},
		"arg_no_input":         {{"extra=1", "no input extra"}, {"add an input extra"}},
		"arg_positional":       {{"up() by position (for parameter sandbox)"}, {"pass it by name (sandbox=...)"}},
		"p_none":               {{"Dag param label", `default is "x"`, "has no default"}, {`defaults: {label: "x"}`}},
		"p_other":              {{`default is "x"`, `its default "y"`}, {`defaults: {label: "x"}`}},
		"p_task_override":      {{"default is 6", "its default 5"}, {"defaults: {n: 6} under dags.at_params.tasks.p_task_override"}},
		"br_missing":           {{"c1 is directly downstream of the stub but not in the Go task's branch"}, {"branch: [a1, b1, c1] and no branch_joins", `bundles.WithBranch("a1", "b1", "c1")`}},
		"br_join":              {{"j2 is also downstream of a2"}, {"branch: [a2, j2] and branch_joins: {j2: [a2]}", `bundles.WithBranchJoin("j2", "a2")`}},
	}
	var hooks []string
	for _, f := range r.Findings {
		if f.File != file {
			t.Errorf("%s: file %q, want %s", f, f.File, file)
		}
		if f.TaskID == "hooks" {
			hooks = append(hooks, f.Problem)
			continue
		}
		s, ok := says[f.TaskID]
		if !ok {
			t.Errorf("no expectation for %s", f)
			continue
		}
		for _, w := range s[0] {
			if !strings.Contains(f.Problem, w) {
				t.Errorf("%s/%s: the problem lacks %q:\n%s", f.DagID, f.TaskID, w, f.Problem)
			}
		}
		for _, w := range s[1] {
			if !strings.Contains(f.Fix, w) {
				t.Errorf("%s/%s: the fix lacks %q:\n%s", f.DagID, f.TaskID, w, f.Fix)
			}
		}
	}
	slices.Sort(hooks)
	if len(hooks) != 2 || !strings.HasPrefix(hooks[0], "post_execute (page_someone)") || !strings.HasPrefix(hooks[1], "pre_execute (page_someone)") {
		t.Errorf("hooks: %q, want pre_execute and post_execute named", hooks)
	}
}

// Airflow's configuration counts as the stub's own: [core]
// default_task_execution_timeout is every task's execution_timeout that
// sets none, and [core] default_impersonation every task's run_as_user.
func TestCheckReadsAirflowsTaskDefaults(t *testing.T) {
	r, _ := checkAttributes(t, "AIRFLOW__CORE__DEFAULT_TASK_EXECUTION_TIMEOUT=20", "AIRFLOW__CORE__DEFAULT_IMPERSONATION=airflow_tasks")
	byTask := map[string][]Finding{}
	for _, f := range r.Findings {
		byTask[f.DagID+"."+f.TaskID] = append(byTask[f.DagID+"."+f.TaskID], f)
	}
	// The Go side's 20s now matches the stub's (from the configuration).
	for _, f := range byTask["at_timeout.timeout_go_only"] {
		if f.Kind == AttributeMismatch {
			t.Errorf("timeout_go_only: %s", f)
		}
	}
	var timeout, runAs bool
	for _, f := range byTask["at_timeout.timeout_stub_only"] {
		timeout = timeout || f.Kind == AttributeMismatch && strings.Contains(f.Problem, "from [core] default_task_execution_timeout")
	}
	for _, f := range byTask["at_plain.plain"] {
		runAs = runAs || f.Kind == NotRunForGoTask && strings.Contains(f.Problem, "[core] default_impersonation (airflow_tasks)") && strings.Contains(f.Fix, "unset [core] default_impersonation")
	}
	if !timeout || !runAs {
		t.Errorf("the configuration's defaults are not named (timeout %v, run_as %v): %v", timeout, runAs, byTask)
	}
}

// With [core] dag_run_conf_overrides_params off, a Python task's params
// ignore the run's conf, and an input the Go side binds to a param reads it
// anyway: each such input is a finding there, and none with Airflow's
// default.
func TestParamsThatIgnoreTheConfAreNamed(t *testing.T) {
	ignoring := func(r Report) []string {
		var tasks []string
		for _, f := range r.Findings {
			if f.Kind == ParamDefaultMismatch && strings.Contains(f.Problem, "dag_run_conf_overrides_params off") {
				tasks = append(tasks, f.TaskID)
			}
		}
		return tasks
	}
	r, _ := checkAttributes(t, "AIRFLOW__CORE__DAG_RUN_CONF_OVERRIDES_PARAMS=False")
	if got := ignoring(r); !slices.Equal(got, []string{"p_none", "p_other", "p_required", "p_same", "p_task_override"}) {
		t.Fatalf("findings for param-bound inputs: %v", got)
	}
	r, _ = checkAttributes(t)
	if got := ignoring(r); len(got) != 0 {
		t.Fatalf("with Airflow's default: %v", got)
	}
}

// stubOf is a stub task with attributes a, in a Dag of one file.
func stubOf(c *checker, a stubFacts) *stubTask {
	return c.stubTask(dagFacts{DagID: "d", FileLoc: "dag.py"}, taskFacts{TaskID: "t", Stub: true, Attributes: &a})
}

func newChecker() *checker {
	return &checker{attrsNoted: map[string]bool{}}
}

// On a bundle of Airflow 3.4's schema the stub call's arguments arrive
// (arg_bindings): a literal or an upstream's result the Go side does not
// bind is no finding there, as it is on 3.3; a template is noted as
// untested, and an argument passed by position stays a finding.
func TestStubArgumentsArriveOnAirflow34(t *testing.T) {
	a := stubFacts{
		Args: map[string]argSource{
			"n":       {Literal: 6.0},
			"sandbox": {XCom: "up", Key: "return_value"},
			"label":   {Literal: "rates-{{ ds }}", Template: true},
			"first":   {XCom: "up", Key: "return_value"},
		},
		Positional:       []string{"first"},
		FunctionDefaults: map[string]any{"m": 7.0},
	}
	td := TaskDescription{Attributes: true, Inputs: []string{"n", "sandbox", "label", "first", "m"}, Defaults: map[string]any{"n": 5.0}}
	for _, tc := range []struct {
		version       string
		findings      []string // the arguments named, in order
		templateNoted bool
	}{
		{schema.V33, []string{"first", "label", "n", "sandbox", "m"}, false},
		{schema.V34, []string{"first"}, true},
	} {
		c := newChecker()
		stubOf(c, a).compareArguments(td, tc.version, "b.bundle")
		var named []string
		for _, f := range c.report.Findings {
			if f.Kind != StubArgumentDropped {
				t.Errorf("%s: kind %s", tc.version, f.Kind)
			}
			for _, n := range []string{"first", "label", "n", "sandbox", "m"} {
				if strings.Contains(f.Problem, "passes "+n+"=") || strings.Contains(f.Problem, "parameter "+n+")") || strings.Contains(f.Problem, "default "+n+"=") {
					named = append(named, n)
				}
			}
		}
		if !slices.Equal(named, tc.findings) {
			t.Errorf("schema %s: findings name %v, want %v: %v", tc.version, named, tc.findings, c.report.Findings)
		}
		noted := len(c.report.Notes) == 1 && strings.Contains(c.report.Notes[0], "untested") && strings.Contains(c.report.Notes[0], "label=")
		if noted != tc.templateNoted {
			t.Errorf("schema %s: notes %v, want a template note: %v", tc.version, c.report.Notes, tc.templateNoted)
		}
	}
}

// A bundle built before describe printed stub attributes is not compared
// (its description has none, which would read as "declares nothing"): one
// note per bundle says so; a bundle that describes them is compared.
func TestOlderBundleIsNotComparedButNoted(t *testing.T) {
	c := newChecker()
	timeout := 20.0
	b := &bundleFile{path: "old.bundle"}
	for _, task := range []string{"t1", "t2"} {
		c.compareAttributes(dagFacts{DagID: "d", FileLoc: "dag.py"}, taskFacts{TaskID: task, Stub: true, Attributes: &stubFacts{ExecutionTimeout: &timeout, DoXComPush: true}}, TaskDescription{}, b)
	}
	if len(c.report.Findings) != 0 || len(c.report.Notes) != 1 || !strings.Contains(c.report.Notes[0], "old.bundle") {
		t.Fatalf("findings %v, notes %v; want none and one note naming the bundle", c.report.Findings, c.report.Notes)
	}
	// The same stub against a bundle that describes its attributes.
	stubOf(c, stubFacts{ExecutionTimeout: &timeout, DoXComPush: true}).compareTimeout(TaskDescription{Attributes: true}, nil)
	if len(c.report.Findings) != 1 || c.report.Findings[0].Kind != AttributeMismatch {
		t.Fatalf("findings %v, want the execution_timeout mismatch", c.report.Findings)
	}
}

// retry_policy is refused too. Airflow's own stub decorator already
// refuses it when it parses the Dag (an import error check reports), so
// this guards stub-like operators that do not.
func TestRetryPolicyIsRefused(t *testing.T) {
	c := newChecker()
	c.refuseRunnerOnly(dagFacts{DagID: "d", FileLoc: "dag.py"}, taskFacts{TaskID: "t", Stub: true, Attributes: &stubFacts{RetryPolicy: "MyPolicy", DoXComPush: true}})
	if len(c.report.Findings) != 1 || c.report.Findings[0].Kind != NotRunForGoTask || !strings.Contains(c.report.Findings[0].Problem, "retry_policy (MyPolicy)") || !strings.Contains(c.report.Findings[0].Fix, "retries") {
		t.Fatalf("findings %v, want retry_policy refused, naming retries instead", c.report.Findings)
	}
}

// A stub whose attributes dagfacts.py could not read is noted, not passed
// over in silence.
func TestUnreadableAttributesAreNoted(t *testing.T) {
	c := newChecker()
	c.refuseRunnerOnly(dagFacts{DagID: "d", FileLoc: "dag.py"}, taskFacts{TaskID: "t", Stub: true, AttributesError: "TypeError: odd"})
	if len(c.report.Notes) != 1 || !strings.Contains(c.report.Notes[0], "task t") || !strings.Contains(c.report.Notes[0], "TypeError: odd") {
		t.Fatalf("notes %v, want one naming the task and the error", c.report.Notes)
	}
}
