package bundles

import (
	"fmt"
	"strings"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// The options a task is registered with (Bundle.Register): where its inputs
// come from, what a run may set, and what the Go side declares of the stub
// (its outlets, mapping and the attributes of attributes.go). They only
// record; newTask (task.go) checks them against the function.

// TaskOption configures a task at registration.
type TaskOption func(*taskOptions)

type taskOptions struct {
	defaults         map[string]any
	bindings         []inputBinding
	allowConf        []string
	confHint         string
	outlets          []Asset
	aliases          []string
	mapIndexTemplate string
	mappedDownstream bool
	// The stub attributes the Go side declares (attributes.go).
	executionTimeout time.Duration
	multipleOutputs  bool
	branch           []string
	branchJoins      map[string][]string
}

// inputBinding says where one input's value comes from at run time: an
// upstream task's XCom, a Dag param (a dag_run.conf key a trigger sets),
// this mapped task instance's element of a list, or an asset event that
// triggered the run.
type inputBinding struct {
	input string
	// entry, from an input named "field[entry]": the field is a mapping
	// and the value becomes its entry of that key, beside the entries the
	// defaults give it (stage_in[in/data.csv] for the one object a mapped
	// instance converts).
	entry string
	// xcomTask and xcomKey name an XCom of the current run; param a
	// dag_run.conf key; items a literal list; asset an asset (URI or
	// name) whose triggering event the input reads. Exactly one of
	// xcomTask, param, items (hasItems) and asset is set.
	xcomTask, xcomKey string
	param             string
	// expand: the task is mapped over the XCom (a list, or items), and
	// each instance takes the element at its map index. mapped: the
	// upstream task is mapped, and the input takes the list of every
	// mapped instance's XCom, in map-index order.
	expand, mapped bool
	items          []any
	hasItems       bool
	asset, field   string
	// all: every matching event's field (oldest first), not the latest.
	all bool
	// template is rendered from Airflow's template context (template.go).
	template    string
	hasTemplate bool
}

// splitEntry splits an input named "field[entry]" (one entry of a
// mapping input) into its field and entry; a plain name has no entry.
func splitEntry(name string) (field, entry string, err error) {
	field, rest, ok := strings.Cut(name, "[")
	if !ok {
		return name, "", nil
	}
	entry, ok = strings.CutSuffix(rest, "]")
	if !ok || entry == "" || field == "" {
		return "", "", fmt.Errorf("input %q: write field[entry] to bind one entry of a mapping (e.g. stage_in[in/data.csv]), or the field's name alone", name)
	}
	return field, entry, nil
}

// describe names the binding for messages, in the bundle config's syntax.
func (b inputBinding) describe() string {
	switch {
	case b.param != "":
		return fmt.Sprintf("{param: %s}", b.param)
	case b.hasItems:
		return fmt.Sprintf("{expand: [%d items]}", len(b.items))
	case b.hasTemplate:
		return fmt.Sprintf("{template: %q}", b.template)
	case b.asset != "":
		s := fmt.Sprintf("{asset_event: %s", b.asset)
		if b.field != "" {
			s += ", field: " + b.field
		}
		if b.all {
			s += ", all: true"
		}
		return s + "}"
	}
	s := fmt.Sprintf("{xcom: %s", b.xcomTask)
	if b.xcomKey != protocol.ReturnValueKey {
		s += ", key: " + b.xcomKey
	}
	if b.expand {
		s += ", expand: true"
	}
	if b.mapped {
		s += ", mapped: true"
	}
	return s + "}"
}

// WithExpandXCom binds input of a mapped task (the stub's
// .expand(input=upstream())) to its own element of the list upstream task
// taskID returned: the instance with map index i takes element i. Airflow
// does not hand an executable its element, so the bundle reads the list
// (GetXCom) and picks it. The upstream, when it is a task of this bundle,
// pushes the list with its length, from which the scheduler expands.
func WithExpandXCom(input, taskID string) TaskOption {
	return func(o *taskOptions) {
		o.bindings = append(o.bindings, inputBinding{input: input, xcomTask: taskID, xcomKey: protocol.ReturnValueKey, expand: true})
	}
}

// WithExpandItems binds input of a task mapped over a literal list (the
// stub's .expand(input=[...])) to its element: the bundle cannot read the
// stub's list, so the same list is given here, and `check` verifies the
// two agree.
func WithExpandItems(input string, items ...any) TaskOption {
	return func(o *taskOptions) {
		o.bindings = append(o.bindings, inputBinding{input: input, items: items, hasItems: true, expand: true})
	}
}

// WithMappedXCom binds input to the list of return values of every mapped
// instance of upstream task taskID, in map-index order (a downstream that
// collects a mapped task's results), read with one GetXComSequenceSlice.
func WithMappedXCom(input, taskID string) TaskOption {
	return func(o *taskOptions) {
		o.bindings = append(o.bindings, inputBinding{input: input, xcomTask: taskID, xcomKey: protocol.ReturnValueKey, mapped: true})
	}
}

// WithAssetEvent binds input to field (a dotted path: extra.url,
// asset.uri, source_run_id; empty for the whole event) of the latest asset
// event of asset (its URI or name) that triggered this run
// (dag_run.consumed_asset_events). A run no such event triggered (a manual
// one) leaves the input to dag_run.conf and the defaults.
func WithAssetEvent(input, asset, field string) TaskOption {
	return func(o *taskOptions) {
		o.bindings = append(o.bindings, inputBinding{input: input, asset: asset, field: field})
	}
}

// WithAssetEvents is WithAssetEvent for every such event: input takes the
// list of their fields, oldest first (the scheduler may queue several
// events into one run).
func WithAssetEvents(input, asset, field string) TaskOption {
	return func(o *taskOptions) {
		o.bindings = append(o.bindings, inputBinding{input: input, asset: asset, field: field, all: true})
	}
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
	return WithXComKey(input, taskID, protocol.ReturnValueKey)
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

// WithTemplate binds input to template rendered as Airflow renders a stub
// argument such as "rates-{{ ds }}", which Airflow 3.3 never hands a Go task:
// {{ name }} is replaced by the value Airflow's template context gives name
// (the names package bundles/internal/jinja lists), {{ params.x }} and {{ dag_run.conf.x }} by the run's
// dag_run.conf key x. Only such substitutions: filters, macros, {% %}
// statements and other names are refused when the task is registered.
func WithTemplate(input, template string) TaskOption {
	return func(o *taskOptions) {
		o.bindings = append(o.bindings, inputBinding{input: input, template: template, hasTemplate: true})
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

// WithOutlets declares the assets the task writes: the stub task's
// outlets=[Asset(...)]. Airflow's coordinator does not tell a bundle what
// the stub declares, and the Execution API registers asset events only for
// the outlets the task reports when it succeeds, so the bundle must know
// them; `check` compares them with the stub Dag. A successful run reports
// an event for each, with the extra the task set (Outlets).
func WithOutlets(assets ...Asset) TaskOption {
	return func(o *taskOptions) { o.outlets = append(o.outlets, assets...) }
}

// WithOutletAliases declares asset aliases among the task's outlets
// (outlets=[AssetAlias("name")]): the task names the assets behind them at
// run time with Outlets.AliasEvent.
func WithOutletAliases(names ...string) TaskOption {
	return func(o *taskOptions) { o.aliases = append(o.aliases, names...) }
}

// WithMapIndexTemplate names each mapped task instance in the UI (its
// rendered map index) from its inputs: "{url}" is the bound value of input
// url (a string as it is, anything else as JSON). It is the Go task's
// map_index_template, which Airflow does not render for executables.
func WithMapIndexTemplate(template string) TaskOption {
	return func(o *taskOptions) { o.mapIndexTemplate = template }
}

// WithMappedDownstream says a mapped task outside this bundle's bindings
// (a Python task, say) expands over this task's return value: the runtime
// then pushes it with its length, from which the scheduler creates the
// mapped task instances. A task of this bundle bound with WithExpandXCom
// to this one implies it.
func WithMappedDownstream() TaskOption {
	return func(o *taskOptions) { o.mappedDownstream = true }
}

// WithExecutionTimeout is the stub's execution_timeout: once the task has
// run for d, its context is cancelled (a sandbox command running at the
// time is stopped, cleanup runs within the cancel grace) and the task fails
// naming execution_timeout; Airflow retries it if it has retries left, as it
// retries a Python task that timed out.
func WithExecutionTimeout(d time.Duration) TaskOption {
	return func(o *taskOptions) { o.executionTimeout = d }
}

// WithMultipleOutputs is the stub's multiple_outputs=True: the task returns
// a mapping (a map with string keys or a struct), and each of its keys is
// pushed as an XCom of its own beside return_value, so a downstream task can
// read one key (task()["key"] in a Dag).
func WithMultipleOutputs() TaskOption {
	return func(o *taskOptions) { o.multipleOutputs = true }
}

// WithBranch makes the task a branch, as Airflow's @task.branch: downstream
// are the ids of the tasks directly downstream of it in the Dag, and the
// function returns the id (a string) or ids (a []string) of those to
// follow, or nil to follow none. The runtime has Airflow skip the others
// (SkipDownstreamTasks), whose own downstream tasks then follow their
// trigger rules. A result with a FollowTasks() []string method chooses
// through it (the standard run task: the last line its command printed).
func WithBranch(downstream ...string) TaskOption {
	return func(o *taskOptions) { o.branch = append(o.branch, downstream...) }
}

// WithBranchJoin declares that join, one of the branch's downstream tasks,
// is also downstream of the tasks in after (the "join" of Airflow's
// branching pattern: branch >> [a, join]; a >> join). As in Airflow,
// following any of after follows join too, so it is not skipped.
func WithBranchJoin(join string, after ...string) TaskOption {
	return func(o *taskOptions) {
		if o.branchJoins == nil {
			o.branchJoins = map[string][]string{}
		}
		o.branchJoins[join] = append(o.branchJoins[join], after...)
	}
}
