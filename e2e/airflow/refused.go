package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/check"
)

// The stub_refused Dag (e2e/airflow/testdata/stub_refused) holds what
// `airflow-go-worker check` refuses, run anyway: the checks below show
// that each refusal is needed and that what does work for a Go task works.

// echoMessages are the elements of the Dag's .expand_kwargs(), in order.
var echoMessages = []string{"first", "second"}

// The Variables the Dag's callbacks write when they run.
const (
	runFailedVariable  = "stub_refused_run_failed"  // the Dag's on_failure_callback
	taskFailedVariable = "stub_refused_task_failed" // go_echo's own on_failure_callback
)

// checkStubRefused: go_echo's instances failed before they ran, saying
// what to write instead, while py_echo's succeeded each with its element;
// the Dag's on_failure_callback ran for go_echo's failure and go_echo's
// own never did; and check refuses the Dag for both.
func checkStubRefused(ctx context.Context, e *checkEnv, r *dagRun) []error {
	errs := checkExpandKwargsTwins(ctx, e, r)
	errs = append(errs, checkCallbacks(ctx, e, r)...)
	return append(errs, checkRefusals(ctx, e)...)
}

// checkExpandKwargsTwins: each go_echo instance failed in its first and
// only try, its log naming .expand_kwargs() and the binding to write, and
// no sandbox was made for it; each py_echo instance returned its element.
func checkExpandKwargsTwins(ctx context.Context, e *checkEnv, r *dagRun) []error {
	var errs []error
	for i, msg := range echoMessages {
		goInst, pyInst := instanceKey("go_echo", i), instanceKey("py_echo", i)
		if ts := r.tasks[goInst]; ts.state != "failed" || ts.try != 1 {
			errs = append(errs, fmt.Errorf("%s is %q after %d tries, want failed after one: a Go task that takes no element must not run", goInst, ts.state, ts.try))
		} else {
			errs = append(errs, logSays(ctx, e, r, goInst, "takes no mapped element", ".expand_kwargs()", "expand: true")...)
		}
		var got string
		if ts := r.tasks[pyInst]; ts.state != "success" {
			errs = append(errs, fmt.Errorf("%s is %q, want success", pyInst, ts.state))
		} else if err := e.api.xcom(ctx, r, pyInst, "return_value", &got); err != nil {
			errs = append(errs, err)
		} else if got != msg {
			errs = append(errs, fmt.Errorf("%s returned %q, want its element %q", pyInst, got, msg))
		}
	}
	for _, task := range []string{"go_echo", "py_echo"} {
		if _, ok := r.tasks[instanceKey(task, len(echoMessages))]; ok {
			errs = append(errs, fmt.Errorf("%s has more instances than the %d elements", task, len(echoMessages)))
		}
	}
	if ids := e.modal.createdFor(r.scenario.dagID, r.runID); len(ids) > 0 {
		errs = append(errs, fmt.Errorf("the fake Modal server created sandboxes %v for go_echo, which should have failed before making any", ids))
	}
	if keys, err := e.store.keys(ctx, "stub-refused/"+r.runID+"/"); err != nil {
		errs = append(errs, err)
	} else if len(keys) > 0 {
		errs = append(errs, fmt.Errorf("go_echo exported %v: its instances ran on their defaults", keys))
	}
	if len(errs) == 0 {
		info(".expand_kwargs: go_echo's %d instances failed at once, naming what to write; py_echo's returned %v", len(echoMessages), echoMessages)
	}
	return errs
}

// checkCallbacks: the Dag's on_failure_callback, which the dag-processor
// runs some time after the run failed, recorded this run's failure and
// go_echo as its failed task; go_echo's own on_failure_callback, which
// only Airflow's Python task runner would call, recorded nothing.
func checkCallbacks(ctx context.Context, e *checkEnv, r *dagRun) []error {
	var value string
	err := poll(ctx, 2*time.Minute, time.Second, "the Dag's on_failure_callback to set Variable "+runFailedVariable, e.alive, func() (bool, string, error) {
		v, found, err := e.api.variable(ctx, runFailedVariable)
		value = v
		return found, "not set yet", err
	})
	if err != nil {
		return []error{err}
	}
	var got struct {
		RunID  string `json:"run_id"`
		Reason string `json:"reason"`
		TaskID string `json:"task_id"`
	}
	if err := json.Unmarshal([]byte(value), &got); err != nil {
		return []error{fmt.Errorf("Variable %s is %q, not the callback's JSON: %v", runFailedVariable, value, err)}
	}
	var errs []error
	if got.RunID != r.runID || got.Reason != "task_failure" || got.TaskID != "go_echo" {
		errs = append(errs, fmt.Errorf("the Dag's on_failure_callback recorded %+v, want run %s, reason task_failure, task go_echo", got, r.runID))
	}
	// The run's own callback ran after go_echo had ended; a task callback
	// runs before its task's end is reported, so it would be set by now.
	if v, found, err := e.api.variable(ctx, taskFailedVariable); err != nil {
		errs = append(errs, err)
	} else if found {
		errs = append(errs, fmt.Errorf("go_echo's on_failure_callback ran (Variable %s is %q): check refuses it as never running; revisit that", taskFailedVariable, v))
	}
	if len(errs) == 0 {
		info("callbacks: the Dag's on_failure_callback ran for go_echo's failure (reason %s); go_echo's own never ran", got.Reason)
	}
	return errs
}

// checkRefusals runs `airflow-go-worker check` over the deployment's Dags
// folder, with its settings, as the deployment docs say: it finds exactly
// what stub_refused does wrong and nothing in the examples.
func checkRefusals(ctx context.Context, e *checkEnv) []error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.o.workerBin, "check", "--dags", e.w.dags, "--python", filepath.Join(e.o.venv, "bin", "python"), "--format", "json")
	cmd.Env = e.af.env
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		return []error{fmt.Errorf("airflow-go-worker check exited with %v, want status 1 for its findings%s\n%s", err, stderrOf(err), out)}
	}
	var rep check.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		return []error{fmt.Errorf("check --format json printed %q: %v", out, err)}
	}
	want := []refusal{
		{check.MappingUnsupported, "go_echo", ".expand_kwargs()"},
		{check.NotRunForGoTask, "go_echo", "on_failure_callback"},
	}
	sortRefusals(want)
	if got := refusalsOf(rep, want); !slices.Equal(got, want) {
		return []error{fmt.Errorf("check found %v, want only %v on Dag stub_refused:\n%s", got, want, out)}
	}
	info("check: refuses stub_refused for %v and passes the other %d Dags", want, rep.Dags-1)
	return nil
}

// refusal is a finding check must make on Dag stub_refused: its kind, the
// task, and what its problem names.
type refusal struct {
	kind       check.Kind
	task, says string
}

func (f refusal) String() string { return fmt.Sprintf("%s on %s (%s)", f.kind, f.task, f.says) }

// refusalsOf turns the report's findings into refusals, matching each to
// the wanted one of its kind and task whose words its problem holds; a
// finding that matches none keeps its whole problem as says.
func refusalsOf(rep check.Report, want []refusal) []refusal {
	var got []refusal
	for _, f := range rep.Findings {
		r := refusal{f.Kind, f.DagID + "." + f.TaskID, f.Problem}
		for _, w := range want {
			if f.DagID == "stub_refused" && w.kind == f.Kind && w.task == f.TaskID && strings.Contains(f.Problem, w.says) {
				r = w
			}
		}
		got = append(got, r)
	}
	sortRefusals(got)
	return got
}

func sortRefusals(list []refusal) {
	slices.SortFunc(list, func(a, b refusal) int { return strings.Compare(a.String(), b.String()) })
}
