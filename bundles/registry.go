package bundles

import (
	"fmt"
	"strings"
	"sync"
)

// TaskRef names one registered task.
type TaskRef struct {
	DagID  string
	TaskID string
}

// TaskOption configures a task at registration.
type TaskOption func(*taskOptions)

type taskOptions struct {
	defaults  map[string]any
	bindings  []inputBinding
	allowConf []string
	confHint  string
}

// inputBinding says where one input's value comes from at run time: an
// upstream task's XCom or a Dag param (a dag_run.conf key a trigger sets).
type inputBinding struct {
	input string
	// xcomTask and xcomKey name an XCom of the current run; param a
	// dag_run.conf key. Exactly one of xcomTask and param is set.
	xcomTask, xcomKey string
	param             string
}

// describe names the binding for messages, in the bundle config's syntax.
func (b inputBinding) describe() string {
	if b.param != "" {
		return fmt.Sprintf("{param: %s}", b.param)
	}
	if b.xcomKey != ReturnValueKey {
		return fmt.Sprintf("{xcom: %s, key: %s}", b.xcomTask, b.xcomKey)
	}
	return fmt.Sprintf("{xcom: %s}", b.xcomTask)
}

// WithDefaults gives input values of the lowest priority: arg_bindings,
// input bindings and allowed dag_run.conf keys override them. Keys must
// name fields of the task's input struct (matched like bindings), so a typo
// is caught at registration.
func WithDefaults(defaults map[string]any) TaskOption {
	return func(o *taskOptions) {
		if o.defaults == nil {
			o.defaults = map[string]any{}
		}
		for k, v := range defaults {
			o.defaults[k] = v
		}
	}
}

// WithXCom binds input to the return_value XCom of upstream task taskID in
// the same Dag run, read with GetXCom when the task starts. It works on
// Airflow 3.3, which drops a stub call's arguments, as on 3.4, where an
// argument passed in the stub call (arg_bindings) takes precedence.
func WithXCom(input, taskID string) TaskOption {
	return WithXComKey(input, taskID, ReturnValueKey)
}

// WithXComKey is WithXCom for an XCom key other than return_value.
func WithXComKey(input, taskID, key string) TaskOption {
	return func(o *taskOptions) {
		o.bindings = append(o.bindings, inputBinding{input: input, xcomTask: taskID, xcomKey: key})
	}
}

// WithParam binds input to the Dag param (dag_run.conf key) param: a run
// whose conf sets it sets the input. It ranks below arg_bindings and above
// AllowConf and the defaults; a run that does not set it leaves the input
// to those.
func WithParam(input, param string) TaskOption {
	return func(o *taskOptions) {
		o.bindings = append(o.bindings, inputBinding{input: input, param: param})
	}
}

// AllowConf lets a run's dag_run.conf set the named inputs under their own
// names. By default dag_run.conf sets nothing: whoever triggers a Dag run
// must not choose, say, the files a task reads or the sandbox it acts on.
// A conf key naming any other input of the task fails the task before it
// runs.
func AllowConf(inputs ...string) TaskOption {
	return func(o *taskOptions) {
		o.allowConf = append(o.allowConf, inputs...)
	}
}

// WithConfHint replaces the advice a refused dag_run.conf key gets (list
// it under conf: in the bundle config) with hint, for a task whose inputs
// are set somewhere else: the built-in maintenance Dag takes them from the
// bundle config's sweep: section, where conf: does not apply.
func WithConfHint(hint string) TaskOption {
	return func(o *taskOptions) {
		o.confHint = hint
	}
}

// Bundle is a registry of (dag_id, task_id) -> Go function.
type Bundle struct {
	mu    sync.RWMutex
	order []TaskRef
	tasks map[TaskRef]*task
}

// New returns an empty bundle.
func New() *Bundle {
	return &Bundle{tasks: map[TaskRef]*task{}}
}

// validID is Airflow's rule for dag and task ids: 1-250 letters, digits,
// '_', '-' or '.'. A loop rather than a regexp keeps start-up cheap: the
// binary starts once per task instance.
func validID(s string) bool {
	if len(s) == 0 || len(s) > 250 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// Add registers fn as the implementation of (dagID, taskID). It checks the
// ids, fn's signature (see package docs of Register) and the defaults, and
// refuses a duplicate.
func (b *Bundle) Add(dagID, taskID string, fn any, opts ...TaskOption) error {
	for _, id := range []struct{ what, v string }{{"dag_id", dagID}, {"task_id", taskID}} {
		if !validID(id.v) {
			return fmt.Errorf("invalid %s %q: use 1-250 letters, digits, '_', '-' or '.'", id.what, id.v)
		}
	}
	var o taskOptions
	for _, opt := range opts {
		opt(&o)
	}
	t, err := newTask(fn, o)
	if err != nil {
		return fmt.Errorf("task %s.%s: %w", dagID, taskID, err)
	}
	ref := TaskRef{DagID: dagID, TaskID: taskID}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, dup := b.tasks[ref]; dup {
		return fmt.Errorf("task %s.%s is already registered; each (dag_id, task_id) may have one function", dagID, taskID)
	}
	b.tasks[ref] = t
	b.order = append(b.order, ref)
	return nil
}

// Register is Add for code that registers at start-up, where a bad
// registration is a programming error: it panics instead of returning it.
//
// A task function may take, in any order: context.Context, TaskInstance or
// *TaskInstance, DagRun or *DagRun, hclog.Logger, Client or any interface the
// runtime client satisfies (e.g. ConnectionGetter), and at most one input
// struct (or pointer to struct) whose fields bind by name. It returns error
// or (T, error); a nil-error T is pushed as XCom return_value.
func (b *Bundle) Register(dagID, taskID string, fn any, opts ...TaskOption) *Bundle {
	if err := b.Add(dagID, taskID, fn, opts...); err != nil {
		panic("bundles: " + err.Error())
	}
	return b
}

// Tasks lists the registered tasks in registration order.
func (b *Bundle) Tasks() []TaskRef {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return append([]TaskRef(nil), b.order...)
}

// InputFields lists the input names a task accepts (json names, in field
// order), or nil when it takes no input struct. ok is false for an unknown
// task.
func (b *Bundle) InputFields(dagID, taskID string) (names []string, ok bool) {
	t := b.lookup(dagID, taskID)
	if t == nil {
		return nil, false
	}
	for _, f := range t.fields {
		names = append(names, f.name)
	}
	return names, true
}

// XComBindings lists the task's inputs bound to an upstream task's XCom
// (bundle config inputs: {xcom: ...}, WithXCom, WithXComKey): input name ->
// the task and key it reads in the same Dag run. ok is false for an unknown
// task. Tools that check a Dag's wiring (check) read them.
func (b *Bundle) XComBindings(dagID, taskID string) (bound map[string]XComRef, ok bool) {
	t := b.lookup(dagID, taskID)
	if t == nil {
		return nil, false
	}
	bound = map[string]XComRef{}
	for i, src := range t.bound {
		if src.xcomTask != "" {
			bound[t.fields[i].name] = XComRef{DagID: dagID, TaskID: src.xcomTask, Key: src.xcomKey}
		}
	}
	return bound, true
}

func (b *Bundle) lookup(dagID, taskID string) *task {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.tasks[TaskRef{DagID: dagID, TaskID: taskID}]
}

// foldName matches input names case- and underscore-insensitively, so
// "conn_id", "ConnID" and "connId" are one name.
func foldName(s string) string {
	return strings.ToLower(strings.ReplaceAll(s, "_", ""))
}
