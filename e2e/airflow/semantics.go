package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The stub_semantics example (examples/stub_semantics) runs each Go stub
// beside its Python @task twin in one Dag run, and the checks below hold
// each pair to the same end: what a Dag author sets on a Go stub takes
// effect as it does on a Python task (issue 37).

// sleepCommand is go_sleep's hanging command in the example's bundle.yaml.
const sleepCommand = "sleep 600"

// The go_env twins' command prints region=$REGION, $REGION from the Dag
// param run_env, whose default the run (triggered without a conf) gets.
const wantRegion = "region=north"

// checkStubSemantics checks every pair, then that the shared sandbox is
// gone.
func checkStubSemantics(ctx context.Context, e *checkEnv, r *dagRun) []error {
	errs := checkTimeoutTwins(ctx, e, r)
	errs = append(errs, checkBranchTwins(ctx, e, r)...)
	errs = append(errs, checkOutputTwins(ctx, e, r)...)
	errs = append(errs, allSucceeded(r, "provision", "destroy")...)
	id := provisioned(ctx, e, r, &errs)
	return append(errs, noSandboxLeft(ctx, e, r, id)...)
}

// checkTimeoutTwins: go_sleep and py_sleep each failed after two tries,
// each try stopped at the execution timeout rather than running its
// 600 s command to the end; go_sleep's log names execution_timeout, each
// of its tries ran the command in a sandbox of its own, and both sandboxes
// are gone with nothing exported.
func checkTimeoutTwins(ctx context.Context, e *checkEnv, r *dagRun) []error {
	limit, err := exampleTimeout(e.o.repo)
	if err != nil {
		return []error{err}
	}
	var errs []error
	took := map[string][]time.Duration{}
	for task, says := range map[string]string{"go_sleep": "execution_timeout", "py_sleep": "AirflowTaskTimeout"} {
		d, problems := timedOutTwice(ctx, e, r, task, limit, says)
		took[task], errs = d, append(errs, problems...)
	}
	errs = append(errs, sleepSandboxes(e, r)...)
	if keys, err := e.store.keys(ctx, "stub-semantics/"+r.runID+"/"); err != nil {
		errs = append(errs, err)
	} else if len(keys) > 0 {
		errs = append(errs, fmt.Errorf("go_sleep exported %v though its command never finished", keys))
	}
	if len(errs) == 0 {
		info("execution_timeout %s: go_sleep's tries took %v, py_sleep's %v; both failed after one retry", limit, took["go_sleep"], took["py_sleep"])
	}
	return errs
}

// exampleTimeout is go_sleep's execution_timeout in the example's bundle
// config (check holds the stub to the same value).
func exampleTimeout(repo string) (time.Duration, error) {
	var cfg struct {
		Dags map[string]struct {
			Tasks map[string]struct {
				ExecutionTimeout string `yaml:"execution_timeout"`
			} `yaml:"tasks"`
		} `yaml:"dags"`
	}
	path := filepath.Join(repo, "examples", "stub_semantics", "bundle.yaml")
	data, err := os.ReadFile(path)
	if err == nil {
		err = yaml.Unmarshal(data, &cfg)
	}
	if err != nil {
		return 0, fmt.Errorf("reading go_sleep's execution_timeout: %w", err)
	}
	d, err := time.ParseDuration(cfg.Dags["stub_semantics"].Tasks["go_sleep"].ExecutionTimeout)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s: go_sleep's execution_timeout is not a duration such as 10s (%v)", path, err)
	}
	return d, nil
}

// timedOutTwice checks one task's tries: two, both failed, each lasting at least limit and far less than the
// command's 600 s (3*limit + 60 s allows for a slow start and the
// sandbox's destruction), each try's log saying says. It returns how long
// each try took.
func timedOutTwice(ctx context.Context, e *checkEnv, r *dagRun, task string, limit time.Duration, says string) ([]time.Duration, []error) {
	tries, err := e.api.tries(ctx, r, task)
	if err != nil {
		return nil, []error{err}
	}
	var errs []error
	var states []string
	for _, t := range tries {
		states = append(states, t.state())
	}
	// Airflow keeps the first try's end in its history as failed, though
	// the task instance then went up_for_retry.
	if !slices.Equal(states, []string{"failed", "failed"}) || r.tasks[task].try != 2 {
		errs = append(errs, fmt.Errorf("%s's tries ended %v (try number %d), want two, both failed (retries=1)", task, states, r.tasks[task].try))
	}
	bound := 3*limit + time.Minute
	var took []time.Duration
	for _, t := range tries {
		if t.Duration == nil {
			errs = append(errs, fmt.Errorf("%s's try %d has no duration", task, t.Try))
			continue
		}
		d := time.Duration(*t.Duration * float64(time.Second)).Round(100 * time.Millisecond)
		took = append(took, d)
		if d < limit || d > bound {
			errs = append(errs, fmt.Errorf("%s's try %d took %s, want between its execution_timeout %s and %s: it was not stopped at the timeout", task, t.Try, d, limit, bound))
		}
		errs = append(errs, tryLogSays(ctx, e, r, task, t.Try, says)...)
	}
	return took, errs
}

// tryLogSays fails unless the log of one try of task says every one of want.
func tryLogSays(ctx context.Context, e *checkEnv, r *dagRun, task string, try int, want ...string) []error {
	text, err := e.api.taskLog(ctx, r, task, try)
	if err != nil {
		return []error{fmt.Errorf("the log of %s, try %d: %w", task, try, err)}
	}
	var errs []error
	for _, w := range want {
		if !strings.Contains(text, w) {
			errs = append(errs, fmt.Errorf("the log of %s, try %d, does not say %q:\n%s", task, try, w, text))
		}
	}
	return errs
}

// sleepSandboxes: go_sleep's command ran in two sandboxes of this run, one
// per try (so each try got as far as the command, which the timeout then
// stopped), and neither still runs.
func sleepSandboxes(e *checkEnv, r *dagRun) []error {
	var ids []string
	for _, x := range e.modal.srv.Execs() {
		if strings.Contains(strings.Join(x.Args, " "), sleepCommand) && !slices.Contains(ids, x.SandboxID) {
			ids = append(ids, x.SandboxID)
		}
	}
	var errs []error
	created := e.modal.createdFor(r.scenario.dagID, r.runID)
	if len(ids) != 2 {
		errs = append(errs, fmt.Errorf("%q ran in sandboxes %v, want two, one per try of go_sleep", sleepCommand, ids))
	}
	for _, id := range ids {
		if !slices.Contains(created, id) {
			errs = append(errs, fmt.Errorf("%q ran in sandbox %s, which was not created for this run", sleepCommand, id))
		}
		for _, s := range e.modal.srv.Sandboxes() {
			if s.ID == id {
				errs = append(errs, fmt.Errorf("go_sleep's sandbox %s still runs after its execution_timeout: cleanup did not destroy it", id))
			}
		}
	}
	return errs
}

// checkBranchTwins: go_branch (a Go run task declared a branch) and
// py_branch (@task.branch) over the same shape, branch >> [left, right,
// join] and left >> join, each choosing left: left and the join ran,
// right was skipped, and each branch left the same XComs, skipmixin_key
// following left and the join.
func checkBranchTwins(ctx context.Context, e *checkEnv, r *dagRun) []error {
	var errs []error
	want := map[string]string{"branch": "success", "left": "success", "right": "skipped", "join": "success"}
	for _, side := range []string{"go", "py"} {
		for role, st := range want {
			if got := r.tasks[side+"_"+role].state; got != st {
				errs = append(errs, fmt.Errorf("%s_%s is %q, want %s (as its twin)", side, role, got, st))
			}
		}
	}
	followed := map[string][]string{}
	for _, side := range []string{"go", "py"} {
		var v struct {
			Followed []string `json:"followed"`
		}
		if err := e.api.xcom(ctx, r, side+"_branch", "skipmixin_key", &v); err != nil {
			errs = append(errs, err)
			continue
		}
		for _, id := range v.Followed {
			followed[side] = append(followed[side], strings.TrimPrefix(id, side+"_"))
		}
		slices.Sort(followed[side])
	}
	if !slices.Equal(followed["go"], []string{"join", "left"}) || !slices.Equal(followed["go"], followed["py"]) {
		errs = append(errs, fmt.Errorf("the branches' skipmixin_key XComs follow %v (go) and %v (py), want both [join left]", followed["go"], followed["py"]))
	}
	errs = append(errs, sameXComKeys(ctx, e, r, "go_branch", "py_branch")...)
	if len(errs) == 0 {
		info("branch: go_branch and py_branch each ran left and the join, skipped right, and left skipmixin_key {followed: [left, join]}")
	}
	return errs
}

// sameXComKeys fails unless the Go task and its Python twin left XComs
// under the same keys; it returns them.
func sameXComKeys(ctx context.Context, e *checkEnv, r *dagRun, goTask, pyTask string) []error {
	goKeys, err := e.api.xcomKeys(ctx, r, goTask)
	if err != nil {
		return []error{err}
	}
	pyKeys, err := e.api.xcomKeys(ctx, r, pyTask)
	if err != nil {
		return []error{err}
	}
	if !slices.Equal(goKeys, pyKeys) {
		return []error{fmt.Errorf("%s left XComs %v, its Python twin %s %v", goTask, goKeys, pyTask, pyKeys)}
	}
	return nil
}

// checkOutputTwins: go_env (multiple_outputs, its env bound to the Dag
// param run_env) and py_env left the same XComs with the same values,
// each key its own; read_go_region got go_env's output_tail key as
// read_py_region got py_env's; and both commands saw the param's default,
// the run's conf not setting it.
func checkOutputTwins(ctx context.Context, e *checkEnv, r *dagRun) []error {
	errs := allSucceeded(r, "go_env", "py_env", "read_go_region", "read_py_region")
	keys, err := e.api.xcomKeys(ctx, r, "py_env")
	if err != nil {
		return append(errs, err)
	}
	if want := []string{"exit_code", "output_tail", "return_value", "timed_out"}; !slices.Equal(keys, want) {
		errs = append(errs, fmt.Errorf("py_env left XComs %v, want %v (multiple_outputs)", keys, want))
	}
	errs = append(errs, sameXComKeys(ctx, e, r, "go_env", "py_env")...)
	for _, k := range keys {
		var goV, pyV any
		err1, err2 := e.api.xcom(ctx, r, "go_env", k, &goV), e.api.xcom(ctx, r, "py_env", k, &pyV)
		if err1 != nil || err2 != nil {
			errs = append(errs, fmt.Errorf("XCom %s: %v, %v", k, err1, err2))
		} else if !reflect.DeepEqual(goV, pyV) {
			errs = append(errs, fmt.Errorf("XCom %s of go_env is %s, of py_env %s", k, jsonText(goV), jsonText(pyV)))
		}
	}
	for _, task := range []string{"read_go_region", "read_py_region"} {
		var got string
		if err := e.api.xcom(ctx, r, task, "return_value", &got); err != nil {
			errs = append(errs, err)
		} else if got != wantRegion {
			errs = append(errs, fmt.Errorf("%s returned %q, want %q: the output_tail key of its upstream, whose command got the param run_env's default", task, got, wantRegion))
		}
	}
	if len(errs) == 0 {
		info("multiple_outputs and the param default: go_env and py_env left the XComs %v with the same values; both read %q", keys, wantRegion)
	}
	return errs
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// checkInletTwins: go_tasks' latest_conversion (Go, Client.GetAssetEvents)
// and latest_conversion_in_python (inlet_events) read the same latest
// event of converted_orders: the one this driver's sandbox_conversion run
// made, naming the URLs its convert wrote.
func checkInletTwins(ctx context.Context, e *checkEnv, r *dagRun) []error {
	errs := allSucceeded(r, "latest_conversion", "latest_conversion_in_python")
	var goV, pyV map[string]any
	if err := e.api.xcom(ctx, r, "latest_conversion", "return_value", &goV); err != nil {
		return append(errs, err)
	}
	if err := e.api.xcom(ctx, r, "latest_conversion_in_python", "return_value", &pyV); err != nil {
		return append(errs, err)
	}
	if !reflect.DeepEqual(goV, pyV) {
		errs = append(errs, fmt.Errorf("latest_conversion returned %s, its Python twin (inlet_events) %s", jsonText(goV), jsonText(pyV)))
	}
	jsonl := "s3://" + bucket + "/converted/" + r.runID + "/orders.jsonl"
	want := map[string]any{"source_dag_id": "sandbox_conversion", "source_run_id": r.runID, "source_task_id": "convert", "urls": []any{jsonl, jsonl + ".gz"}}
	if !reflect.DeepEqual(goV, want) {
		errs = append(errs, fmt.Errorf("latest_conversion returned %s, want sandbox_conversion's event of this driver's run, %s", jsonText(goV), jsonText(want)))
	}
	if len(errs) == 0 {
		info("inlet events: latest_conversion (GetAssetEvents) and its Python twin (inlet_events) read the same event of converted_orders, from sandbox_conversion's run")
	}
	return errs
}
