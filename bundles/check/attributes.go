package check

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/schema"
)

// Airflow applies much of what a Dag author sets on a task in its Python
// task runner, which a Go task replaces: Airflow 3.3 hands an executable
// none of it. What the Go side can declare (execution_timeout,
// multiple_outputs, input bindings and defaults, a branch) check compares
// with the stub; what nothing on the Go side can do it refuses, naming
// what works instead.
const (
	AttributeMismatch    Kind = "attribute_mismatch"     // the Go side applies another value than the stub sets
	NotRunForGoTask      Kind = "not_run_for_go_task"    // a stub attribute only Airflow's Python task runner applies
	StubArgumentDropped  Kind = "stub_argument_dropped"  // a stub call argument the Go task never sees
	ParamDefaultMismatch Kind = "param_default_mismatch" // a Dag param's default the Go task does not share
	BranchMismatch       Kind = "branch_mismatch"        // a branch over other tasks than the stub's downstream
)

// stubFacts is what dagfacts.py reads of a stub beyond its wiring.
type stubFacts struct {
	// ExecutionTimeout in seconds (nil: none), the task's own or [core]
	// default_task_execution_timeout.
	ExecutionTimeout *float64 `json:"execution_timeout"`
	MultipleOutputs  bool     `json:"multiple_outputs"`
	DoXComPush       bool     `json:"do_xcom_push"`
	// Callbacks maps on_*_callback to the callables and notifiers set.
	Callbacks      map[string][]string `json:"callbacks"`
	Email          []string            `json:"email"`
	EmailOnFailure bool                `json:"email_on_failure"`
	EmailOnRetry   bool                `json:"email_on_retry"`
	RetryPolicy    string              `json:"retry_policy"`
	// Hooks maps pre_execute / post_execute to the callable set.
	Hooks               map[string]string `json:"hooks"`
	RunAsUser           string            `json:"run_as_user"`
	RunAsUserFromConfig bool              `json:"run_as_user_from_config"`
	MapIndexTemplate    string            `json:"map_index_template"`
	// Args are the stub call's arguments by parameter name; Positional
	// names those passed by position; FunctionDefaults are the stub
	// function's own defaults the call leaves in place.
	Args             map[string]argSource `json:"args"`
	Positional       []string             `json:"positional"`
	FunctionDefaults map[string]any       `json:"function_defaults"`
	// Params are the params a Python task would see (the Dag's, then
	// the task's).
	Params map[string]paramFacts `json:"params"`
	// Downstream are the direct downstream task ids; Joins maps one to
	// the others it is also downstream of.
	Downstream []string            `json:"downstream"`
	Joins      map[string][]string `json:"joins"`
}

// paramFacts is a merged param: its default, none (required), or a
// default that is not JSON.
type paramFacts struct {
	Default     any    `json:"default"`
	Required    bool   `json:"required"`
	Unsupported string `json:"unsupported"`
}

// stubTask is one Go stub being checked, with what Airflow parsed of it.
type stubTask struct {
	goTask
	a stubFacts
}

func (c *checker) stubTask(d dagFacts, t taskFacts) *stubTask {
	if !t.Stub || t.Attributes == nil {
		return nil
	}
	return &stubTask{goTask: c.goTask(d, t), a: *t.Attributes}
}

// compareAttributes compares what the stub sets with what the bundle's
// Go side declares for it.
func (c *checker) compareAttributes(d dagFacts, t taskFacts, td TaskDescription, b *bundleFile) {
	s := c.stubTask(d, t)
	if s == nil {
		return
	}
	if !td.Attributes {
		if !c.attrsNoted[b.path] {
			c.attrsNoted[b.path] = true
			c.note("stub attributes, call arguments, param defaults and branches of the tasks %s serves not compared: it was built before describe printed them; pack it with this release", b.path)
		}
		return
	}
	s.compareTimeout(td, c.facts.DefaultExecutionTimeout)
	s.compareOutputs(td)
	s.compareArguments(td, b.b.Manifest.SDK.SupervisorSchemaVersion, b.path)
	s.compareParams(td)
	if o := c.facts.ConfOverridesParams; o != nil && !*o {
		s.paramsIgnoreConf(td)
	}
	s.compareBranch(td)
}

// argBindings says whether a bundle declaring schema version v gets the
// stub call's arguments (Airflow 3.4's arg_bindings).
func argBindings(v string) bool { return schema.AtLeast(v, schema.V34) }

// compareTimeout: Airflow enforces execution_timeout in its Python task
// runner only, so the Go side must declare the same limit.
func (s *stubTask) compareTimeout(td TaskDescription, configDefault *float64) {
	var stub float64
	if s.a.ExecutionTimeout != nil {
		stub = *s.a.ExecutionTimeout
	}
	ours := td.ExecutionTimeout
	if micros(stub) == micros(ours) {
		return
	}
	setIt := fmt.Sprintf("set execution_timeout: %s under %s in the bundle config (Go: bundles.WithExecutionTimeout(%s)) and pack it again", seconds(stub), s.where, goDuration(stub))
	switch {
	case ours == 0:
		from := ""
		if configDefault != nil && micros(*configDefault) == micros(stub) {
			from = " (from [core] default_task_execution_timeout)"
		}
		s.add(AttributeMismatch, fmt.Sprintf("the stub sets execution_timeout %s%s, but the Go task declares none, and Airflow enforces it only in its Python task runner, which a Go task replaces: nothing enforces it, and the task would run past it", seconds(stub), from),
			setIt+"; or remove execution_timeout from the stub")
	case stub == 0:
		s.add(AttributeMismatch, fmt.Sprintf("the Go task stops itself after %s (its execution_timeout), but the stub sets no execution_timeout: the run does what the Dag does not say", seconds(ours)),
			fmt.Sprintf("set execution_timeout=timedelta(seconds=%g) on the stub, or remove execution_timeout: from %s (Go: drop bundles.WithExecutionTimeout)", ours, s.where))
	default:
		s.add(AttributeMismatch, fmt.Sprintf("the stub sets execution_timeout %s, but the Go task stops itself after %s: the task runs under another limit than the Dag says", seconds(stub), seconds(ours)),
			setIt+" (the stub's value), or change the stub's")
	}
}

func micros(secs float64) int64 { return int64(math.Round(secs * 1e6)) }

func duration(secs float64) time.Duration { return time.Duration(micros(secs)) * time.Microsecond }

// seconds is a limit as the bundle config writes it (20s, 1h30m0s).
func seconds(secs float64) string { return duration(secs).String() }

// goDuration is a limit as Go code writes it (20 * time.Second).
func goDuration(secs float64) string {
	d := duration(secs)
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Hour, "Hour"}, {time.Minute, "Minute"}, {time.Second, "Second"}, {time.Millisecond, "Millisecond"}} {
		if d%u.unit == 0 {
			return fmt.Sprintf("%d * time.%s", d/u.unit, u.name)
		}
	}
	return fmt.Sprintf("%d * time.Microsecond", d/time.Microsecond)
}

// compareOutputs: multiple_outputs and do_xcom_push decide, in Airflow's
// Python task runner, which XComs a task leaves.
func (s *stubTask) compareOutputs(td TaskDescription) {
	switch {
	case s.a.MultipleOutputs && !td.MultipleOutputs:
		s.add(AttributeMismatch, "the stub sets multiple_outputs (given, or inferred by Airflow from a dict return annotation), but the Go task pushes only return_value: a downstream task reading one key (this_task()[\"key\"]) finds no XCom",
			fmt.Sprintf("set multiple_outputs: true under %s in the bundle config (Go: bundles.WithMultipleOutputs()) and pack it again; or set multiple_outputs=False on the stub", s.where))
	case !s.a.MultipleOutputs && td.MultipleOutputs:
		s.add(AttributeMismatch, "the Go task pushes each key of its result as an XCom of its own (multiple_outputs), but the stub does not set multiple_outputs: the Dag says the task leaves return_value only",
			fmt.Sprintf("set multiple_outputs=True on the stub, or remove multiple_outputs: from %s (Go: drop bundles.WithMultipleOutputs())", s.where))
	}
	if !s.a.DoXComPush && td.ReturnsValue {
		s.add(AttributeMismatch, "the stub sets do_xcom_push=False, but the Go function returns a value, which the runtime pushes as the return_value XCom (Airflow drops it only in its Python task runner)",
			"set do_xcom_push back to True on the stub (remove it), or make the Go function return only error")
	}
}

// refuseRunnerOnly refuses what only Airflow's Python task runner does,
// which no Go-side declaration can replace.
func (c *checker) refuseRunnerOnly(d dagFacts, t taskFacts) {
	if t.AttributesError != "" {
		c.note("%s: Dag %s, task %s: the stub's attributes, call arguments, params and branch not checked: reading them failed: %s", d.FileLoc, d.DagID, t.TaskID, t.AttributesError)
	}
	s := c.stubTask(d, t)
	if s == nil {
		return
	}
	s.refuseCallbacks()
	s.refuseEmail()
	if s.a.RetryPolicy != "" {
		s.add(NotRunForGoTask, fmt.Sprintf("retry_policy (%s) never runs: Airflow evaluates it in its Python task runner, which a Go task replaces", s.a.RetryPolicy),
			"remove retry_policy and use retries (with retry_delay, retry_exponential_backoff); a Go task that must not be retried returns bundles.FailNoRetry(err)")
	}
	for _, hook := range sortedKeys(s.a.Hooks) {
		s.add(NotRunForGoTask, fmt.Sprintf("%s (%s) never runs: Airflow calls it in its Python task runner, which a Go task replaces", hook, s.a.Hooks[hook]),
			fmt.Sprintf("remove %s from the stub and do it in the Go function, or in a Python task %s this one", hook, map[string]string{"pre_execute": "upstream of", "post_execute": "downstream of"}[hook]))
	}
	s.refuseRunAs()
	if s.a.MapIndexTemplate != "" {
		s.add(NotRunForGoTask, fmt.Sprintf("map_index_template %q is never rendered: Airflow renders it in its Python task runner, which a Go task replaces", s.a.MapIndexTemplate),
			fmt.Sprintf("remove map_index_template from the stub and set map_index: \"{<input>}\" under %s in the bundle config (Go: bundles.WithMapIndexTemplate(\"{<input>}\")): the Go task renders it from its inputs", s.where))
	}
}

// callbackInstead says what works for a Go task in place of each task
// callback.
var callbackInstead = map[string]string{
	"on_execute_callback": "do it at the start of the Go function, or in a Python task upstream of this one",
	"on_success_callback": "use the Dag's on_success_callback (@dag(on_success_callback=...)), which Airflow's Dag processor runs when the Dag run succeeds, Go tasks or not; or a Python task downstream of this one",
	"on_failure_callback": "use the Dag's on_failure_callback (@dag(on_failure_callback=...)), which Airflow's Dag processor runs when the Dag run fails, Go tasks or not; or a Python task downstream with trigger_rule=\"one_failed\"",
	"on_retry_callback":   "nothing runs between a Go task's tries; a Go function that takes its TaskInstance sees its try number and can act on a retry itself",
	"on_skipped_callback": "use a Python task downstream with trigger_rule=\"all_skipped\"",
}

func (s *stubTask) refuseCallbacks() {
	for _, kind := range sortedKeys(s.a.Callbacks) {
		problem := fmt.Sprintf("%s (%s) never runs: Airflow runs task callbacks and notifiers in its Python task runner, which a Go task replaces", kind, strings.Join(s.a.Callbacks[kind], ", "))
		if kind == "on_failure_callback" {
			problem += " (it runs only when the task's process dies without reporting)"
		}
		s.add(NotRunForGoTask, problem, fmt.Sprintf("remove %s from the stub; %s", kind, callbackInstead[kind]))
	}
}

func (s *stubTask) refuseEmail() {
	var when []string
	if s.a.EmailOnFailure {
		when = append(when, "fails (email_on_failure)")
	}
	if s.a.EmailOnRetry {
		when = append(when, "is retried (email_on_retry)")
	}
	if len(s.a.Email) == 0 || len(when) == 0 {
		return
	}
	s.add(NotRunForGoTask, fmt.Sprintf("email %s gets no mail when the task %s: Airflow sends it in its Python task runner, which a Go task replaces", strings.Join(s.a.Email, ", "), strings.Join(when, " or ")),
		"remove email from the stub (or set email_on_failure=False, email_on_retry=False) and send the mail from the Dag's on_failure_callback (e.g. SmtpNotifier from airflow.providers.smtp), which Airflow's Dag processor runs for Dag runs of Go tasks too")
}

func (s *stubTask) refuseRunAs() {
	if s.a.RunAsUser == "" {
		return
	}
	what, remove := "run_as_user "+s.a.RunAsUser, "remove run_as_user from the stub"
	if s.a.RunAsUserFromConfig {
		what, remove = fmt.Sprintf("[core] default_impersonation (%s)", s.a.RunAsUser), "unset [core] default_impersonation for the workers of the Go queue"
	}
	s.add(NotRunForGoTask, what+" is not applied: Airflow switches user with sudo in its Python task runner; the coordinator starts the Go bundle as the worker's own user",
		remove+", and run the task on a queue whose workers run as the user it needs")
}

// jsonEqual compares two values as JSON (both came through JSON: a
// Python 5 and a Go 5 are the same float64).
func jsonEqual(a, b any) bool { return jsonValue(a) == jsonValue(b) }

// jsonValue writes a value as JSON, which YAML reads as the same value.
func jsonValue(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(data)
}

// goLiteral writes a JSON value as Go code for a WithDefaults map.
func goLiteral(v any) string {
	switch v := v.(type) {
	case nil:
		return "nil"
	case string:
		return fmt.Sprintf("%q", v)
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = goLiteral(e)
		}
		return "[]any{" + strings.Join(parts, ", ") + "}"
	case map[string]any:
		keys := sortedKeys(v)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%q: %s", k, goLiteral(v[k]))
		}
		return "map[string]any{" + strings.Join(parts, ", ") + "}"
	}
	return jsonValue(v)
}

// yamlList writes ids as a YAML flow list.
func yamlList(ids []string) string { return "[" + strings.Join(ids, ", ") + "]" }

func quoted(ids []string) string {
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = fmt.Sprintf("%q", id)
	}
	return strings.Join(q, ", ")
}

func sortedCopy(ids []string) []string {
	out := append([]string(nil), ids...)
	sort.Strings(out)
	return out
}
