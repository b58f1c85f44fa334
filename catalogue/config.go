// Package catalogue is the standard task catalogue as a Go user imports it:
// the task kinds of package tasks (provision, run, export, collect, destroy,
// convert, sweep) adapted to the bundle runtime, the YAML bundle config
// format that maps Dag tasks to them, the sweep command, and Main, the whole
// main() of the standard bundle. A Go bundle can mix catalogue tasks (Add,
// Load) with its own functions (Adapt gives them the same Deps).
package catalogue

// The standard bundle: a YAML bundle config maps (dag_id, task_id) to a task
// kind of the catalogue plus input defaults, so Dag authors get sandbox tasks
// without writing Go. The config is packed into the bundle's source region
// (so Airflow shows it) and read back from there at run time.
//
//	dags:
//	  sandbox_conversion:
//	    tasks:
//	      convert:
//	        kind: convert
//	        defaults: {backend: local, command: "...", exports: {...}}
//	        inputs: {sandbox: {xcom: provision}, note: {param: note}}
//	        conf: [timeout]
//
// defaults are the Dag author's values; inputs bind an input to an upstream
// task's XCom or a Dag param at run time (so Dags work on Airflow 3.3, which
// drops a stub call's arguments); conf lists the inputs a run's dag_run.conf
// may set under their own names. By default dag_run.conf sets nothing.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/footer"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/selftest"
	"github.com/airflow-sandbox/airflow-go-worker/internal/yamlnode"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/registry"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
	"github.com/airflow-sandbox/airflow-go-worker/tasks"
)

// bundleConfig is the YAML file's shape. Unknown keys are errors: a
// misspelt key would otherwise silently fall back to a default.
type bundleConfig struct {
	// Selftest adds the built-in airflow_go_worker_selftest Dag, so an
	// operator can check a deployment of this bundle.
	Selftest bool `yaml:"selftest"`
	// Sweep adds the airflow_go_worker_sweep maintenance Dag, whose one
	// task sweeps these backends and storage prefixes
	// (tasks.SweepAllInput: backends, storage, storage_conn_id,
	// older_than, dry_run).
	Sweep map[string]any `yaml:"sweep"`
	// Backends holds each sandbox backend's options for every task of the
	// bundle (a task's own backend_options override them key by key).
	Backends map[string]map[string]any `yaml:"backends"`
	Dags     dagsByID                  `yaml:"dags"`
	// order lists dag ids and, per Dag, task ids as the file lists them:
	// tasks register (and `run --dag` runs them) in the author's order.
	order []orderedDag `yaml:"-"`
}

type orderedDag struct {
	id    string
	tasks []string
}

type dagConfig struct {
	Description string    `yaml:"description"`
	Tasks       tasksByID `yaml:"tasks"`
}

type taskConfig struct {
	Kind     string                 `yaml:"kind"`
	Defaults map[string]any         `yaml:"defaults"`
	Inputs   map[string]inputConfig `yaml:"inputs"`
	Conf     []string               `yaml:"conf"`
	// Outlets are the stub task's outlets=[...]: the assets a successful
	// run emits events for (check compares them with the stub Dag).
	Outlets []outletConfig `yaml:"outlets"`
	// MapIndex names each mapped instance in the UI from its inputs
	// ("{url}").
	MapIndex string `yaml:"map_index"`
	// MappedDownstream: a mapped task outside this config's bindings
	// expands over this task's return value.
	MappedDownstream bool `yaml:"mapped_downstream"`
	// The stub's attributes Airflow applies in its Python task runner and
	// never hands a Go task, declared here too (check compares them):
	// execution_timeout ("20m" or seconds), multiple_outputs, and a
	// branch's direct downstream tasks with its joins.
	ExecutionTimeout string              `yaml:"execution_timeout"`
	MultipleOutputs  bool                `yaml:"multiple_outputs"`
	Branch           []string            `yaml:"branch"`
	BranchJoins      map[string][]string `yaml:"branch_joins"`
}

// outletConfig is one outlet: an asset (uri and/or name) or an alias.
type outletConfig struct {
	URI   string `yaml:"uri"`
	Name  string `yaml:"name"`
	Alias string `yaml:"alias"`
}

// inputConfig is one entry of a task's inputs: where the input's value
// comes from when the task runs.
type inputConfig struct {
	XCom  string `yaml:"xcom"`  // upstream task id in the same Dag run
	Key   string `yaml:"key"`   // its XCom key; return_value when empty
	Param string `yaml:"param"` // a Dag param: the dag_run.conf key a trigger sets
	// Expand: true (with xcom) takes this mapped instance's element of
	// the upstream's list; a list takes its element of that list (the
	// stub's .expand(input=[...])).
	Expand any `yaml:"expand"`
	// Mapped (with xcom): the upstream is mapped; take all its results.
	Mapped bool `yaml:"mapped"`
	// AssetEvent is an asset (uri or name) whose triggering event's
	// Field (a dotted path such as extra.url) the input takes; All takes
	// every such event's, oldest first.
	AssetEvent string `yaml:"asset_event"`
	Field      string `yaml:"field"`
	All        bool   `yaml:"all"`
	// Template is rendered as Airflow renders a stub argument such as
	// "rates-{{ ds }}" (bundles.WithTemplate), which 3.3 never hands over.
	Template string `yaml:"template"`
}

// option turns the entry into the registry option it stands for.
func (in inputConfig) option(name string) (bundles.TaskOption, error) {
	items, isList := in.Expand.([]any)
	expandXCom := in.Expand == true
	switch {
	case in.Expand != nil && !isList && in.Expand != true && in.Expand != false:
		return nil, fmt.Errorf("inputs.%s: expand is true (beside xcom: the upstream's list) or a list, not %v", name, in.Expand)
	case in.AssetEvent == "" && (in.Field != "" || in.All):
		return nil, fmt.Errorf("inputs.%s: field and all read an asset event; give asset_event: <asset uri or name> beside them", name)
	case in.XCom == "" && (expandXCom || in.Mapped):
		return nil, fmt.Errorf("inputs.%s: expand: true and mapped: true read an upstream's XCom; give xcom: <upstream task_id> beside them", name)
	}
	sources := 0
	for _, set := range []bool{in.XCom != "", in.Param != "", isList, in.AssetEvent != "", in.Template != ""} {
		if set {
			sources++
		}
	}
	switch {
	case sources > 1:
		return nil, fmt.Errorf("inputs.%s: give one of xcom, param, expand: [...], asset_event and template", name)
	case in.Template != "":
		return bundles.WithTemplate(name, in.Template), nil
	case isList:
		return bundles.WithExpandItems(name, items...), nil
	case in.AssetEvent != "" && in.All:
		return bundles.WithAssetEvents(name, in.AssetEvent, in.Field), nil
	case in.AssetEvent != "":
		return bundles.WithAssetEvent(name, in.AssetEvent, in.Field), nil
	case in.XCom != "" && (expandXCom || in.Mapped) && in.Key != "" && in.Key != protocol.ReturnValueKey:
		return nil, fmt.Errorf("inputs.%s: expand and mapped read the upstream's return_value; leave key out", name)
	case in.XCom != "" && expandXCom && in.Mapped:
		return nil, fmt.Errorf("inputs.%s: expand: true (this task is mapped over the list) and mapped: true (the upstream is mapped) exclude each other", name)
	case in.XCom != "" && expandXCom:
		return bundles.WithExpandXCom(name, in.XCom), nil
	case in.XCom != "" && in.Mapped:
		return bundles.WithMappedXCom(name, in.XCom), nil
	case in.XCom != "":
		key := in.Key
		if key == "" {
			key = protocol.ReturnValueKey
		}
		return bundles.WithXComKey(name, in.XCom, key), nil
	case in.Key != "":
		return nil, fmt.Errorf("inputs.%s: key %q needs xcom: <upstream task_id> beside it", name, in.Key)
	case in.Param != "":
		return bundles.WithParam(name, in.Param), nil
	}
	return nil, fmt.Errorf("inputs.%s: give {xcom: <upstream task_id>} (optionally with key: <xcom key>, expand: true or mapped: true), {param: <name>}, {expand: [<item>, ...]}, {asset_event: <asset uri or name>, field: <path such as extra.url>} or {template: \"...{{ ds }}...\"}", name)
}

// options are the task's outlets and mapping settings as registry options.
func (tc taskConfig) options() ([]bundles.TaskOption, error) {
	var opts []bundles.TaskOption
	var assets []bundles.Asset
	var aliases []string
	for i, o := range tc.Outlets {
		switch {
		case o.Alias != "" && (o.URI != "" || o.Name != ""):
			return nil, fmt.Errorf("outlets[%d]: an entry is an asset ({uri: ..., name: ...}) or an alias ({alias: ...}), not both", i)
		case o.Alias != "":
			aliases = append(aliases, o.Alias)
		case o.URI == "" && o.Name == "":
			return nil, fmt.Errorf("outlets[%d]: give the asset's uri (and name, when the stub's Asset has one), or alias: <name>", i)
		default:
			assets = append(assets, bundles.Asset{Name: o.Name, URI: o.URI})
		}
	}
	if len(assets) > 0 {
		opts = append(opts, bundles.WithOutlets(assets...))
	}
	if len(aliases) > 0 {
		opts = append(opts, bundles.WithOutletAliases(aliases...))
	}
	if tc.MapIndex != "" {
		opts = append(opts, bundles.WithMapIndexTemplate(tc.MapIndex))
	}
	if tc.MappedDownstream {
		opts = append(opts, bundles.WithMappedDownstream())
	}
	attrs, err := tc.attributes()
	return append(opts, attrs...), err
}

// attributes are the stub attributes the task declares, as registry
// options (bundles.Add checks them against the task's function).
func (tc taskConfig) attributes() ([]bundles.TaskOption, error) {
	var opts []bundles.TaskOption
	if tc.ExecutionTimeout != "" {
		d, err := tasks.ParseDuration(tc.ExecutionTimeout)
		if err != nil {
			return nil, fmt.Errorf("execution_timeout: %v (write the stub's execution_timeout, e.g. 20m for timedelta(minutes=20))", err)
		}
		opts = append(opts, bundles.WithExecutionTimeout(d))
	}
	if tc.MultipleOutputs {
		opts = append(opts, bundles.WithMultipleOutputs())
	}
	if len(tc.Branch) > 0 {
		opts = append(opts, bundles.WithBranch(tc.Branch...))
	}
	for _, join := range slices.Sorted(maps.Keys(tc.BranchJoins)) {
		opts = append(opts, bundles.WithBranchJoin(join, tc.BranchJoins[join]...))
	}
	return opts, nil
}

// Load registers with b the tasks a YAML bundle config declares. source
// is the config's display name (its file name). Errors name the source,
// the Dag, the task and the key at fault; what the bundle's backends
// cannot do (gpu on local), a backend it does not link or a misspelt
// option fail here, so pack, inspect and --airflow-metadata refuse them.
func Load(b *bundles.Bundle, data []byte, source string) error {
	cfg, err := parseBundleConfig(data, source)
	if err != nil {
		return err
	}
	if cfg.Selftest {
		selftest.Register(b)
	}
	if cfg.Sweep != nil {
		if err := registerSweepDag(b, cfg.Sweep, cfg.Backends); err != nil {
			return fmt.Errorf("%s: sweep: %w", source, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Backends)) {
		raw, err := json.Marshal(cfg.Backends[name])
		if err != nil {
			return fmt.Errorf("%s: backends.%s: values must be plain YAML scalars, lists and mappings: %v", source, name, err)
		}
		if _, _, err := registry.Default.Configure(name, raw); err != nil {
			return fmt.Errorf("%s: backends.%s: %w", source, name, err)
		}
	}
	for _, od := range cfg.order {
		dagID, dag := od.id, cfg.Dags[od.id]
		for _, taskID := range od.tasks {
			tc := dag.Tasks[taskID]
			where := fmt.Sprintf("%s: dags.%s.tasks.%s", source, dagID, taskID)
			kind, err := kindFor(tc.Kind)
			if err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			defaults := tc.Defaults
			if len(cfg.Backends) > 0 && hasInput(kind.input, "backend_options") {
				defaults = withBackendDefaults(defaults, cfg.Backends)
			}
			opts, err := tc.options()
			if err != nil {
				return fmt.Errorf("%s.%w", where, err)
			}
			for _, name := range slices.Sorted(maps.Keys(tc.Inputs)) {
				opt, err := tc.Inputs[name].option(name)
				if err != nil {
					return fmt.Errorf("%s.%w", where, err)
				}
				opts = append(opts, opt)
			}
			if len(tc.Conf) > 0 {
				opts = append(opts, bundles.AllowConf(tc.Conf...))
			}
			// b.Add checks each default, input and conf entry names an
			// input field, and each default has its type.
			if inDefaults, err := kind.add(b, dagID, taskID, defaults, slices.Collect(maps.Keys(tc.Inputs)), opts...); inDefaults {
				return fmt.Errorf("%s.defaults: %w", where, err)
			} else if err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
		}
	}
	return nil
}

// maxBundleConfigSize caps a bundle config. It is read (and parsed) each
// time a task starts, before the task connects to Airflow: a config big
// enough to take seconds would otherwise end as a misleading "did not
// connect within 10s". 100k Dags fit in a few MiB.
const maxBundleConfigSize = 16 << 20

// parseBundleConfig decodes the YAML strictly.
func parseBundleConfig(data []byte, source string) (bundleConfig, error) {
	var cfg bundleConfig
	if len(data) > maxBundleConfigSize {
		return cfg, fmt.Errorf("%s: the bundle config is %d bytes, over the %d-byte (%d MiB) limit; it names Dags, tasks and their defaults, not data: split it over several bundles, or move large values (scripts, inputs) to files the tasks stage in", source, len(data), maxBundleConfigSize, maxBundleConfigSize>>20)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return cfg, fmt.Errorf("%s: %v", source, err)
	}
	if len(doc.Content) == 0 {
		return cfg, fmt.Errorf("%s: the bundle config is empty; it needs a dags: mapping", source)
	}
	if err := checkShape(&doc, reflect.TypeFor[bundleConfig](), source); err != nil {
		return cfg, err
	}
	// checkShape refused every unknown key, repeated key and value of the
	// wrong kind, so this decodes what the file says.
	if err := doc.Decode(&cfg); err != nil {
		return cfg, fmt.Errorf("%s: %v", source, err)
	}
	if len(cfg.Dags) == 0 && cfg.Sweep == nil {
		return cfg, fmt.Errorf("%s: no dags declared; add dags: {<dag_id>: {tasks: {...}}}", source)
	}
	for dagID, dag := range cfg.Dags {
		if len(dag.Tasks) == 0 {
			return cfg, fmt.Errorf("%s: dags.%s has no tasks; add tasks: {<task_id>: {kind: ...}} or remove the Dag", source, dagID)
		}
	}
	cfg.order = fileOrder(yamlnode.Value(doc.Content[0], "dags"))
	return cfg, nil
}

// fileOrder lists the Dags of a dags: mapping node, and each Dag's tasks,
// in file order, in one pass (looking each Dag up by id again made loading
// quadratic in the number of Dags: 100k took over a minute).
func fileOrder(dags *yaml.Node) []orderedDag {
	for dags != nil && dags.Kind == yaml.AliasNode {
		dags = dags.Alias
	}
	if dags == nil || dags.Kind != yaml.MappingNode {
		return nil
	}
	order := make([]orderedDag, 0, len(dags.Content)/2)
	for i := 0; i+1 < len(dags.Content); i += 2 {
		order = append(order, orderedDag{id: dags.Content[i].Value, tasks: yamlnode.Keys(yamlnode.Value(dags.Content[i+1], "tasks"))})
	}
	return order
}

// checkDefaults decodes the defaults strictly, so a misspelt key inside a
// nested mapping (network: {blok: true}) is an error rather than silently
// meaning the default (top-level keys and types were checked by
// bundles.Add), and lets the input check itself as far as it can without
// I/O: against the backends and stores this bundle links (a backend or a
// URL's store it does not link, a misspelt backend option, a setting the
// backend cannot provide such as gpu on local, or one its own rules refuse
// such as a registry image on local), and against the rules of every
// sandbox (a lifetime over 24h, a relative workdir). So such a config
// fails when the bundle is packed, inspected or checked, rather than at a
// task. Inputs bound at run time (an upstream's XCom, a Dag param) are not
// known here: their defaults never apply and are not checked, and when the
// backend itself is bound only the rules of every sandbox are.
func checkDefaults(input reflect.Type, defaults map[string]any, bound []string) error {
	data, err := json.Marshal(defaults)
	if err != nil {
		return fmt.Errorf("values must be plain YAML scalars, lists and mappings: %v", err)
	}
	v := reflect.New(input)
	if len(defaults) > 0 {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v.Interface()); err != nil {
			return err
		}
	}
	if len(bound) > 0 {
		// What the task uses when it runs: the defaults of inputs no
		// binding replaces.
		if v, err = decodeUnbound(input, defaults, bound); err != nil {
			return err
		}
	}
	in := v.Elem().Interface()
	backendBound := slices.Contains(bound, "backend") || slices.Contains(bound, "backend_options")
	if c, ok := in.(interface {
		Check(*registry.Registry) error
	}); ok && !backendBound {
		if err := c.Check(registry.Default); err != nil {
			return err
		}
	} else if c, ok := in.(interface{ Validate() error }); ok {
		if err := c.Validate(); err != nil {
			return err
		}
	}
	if c, ok := in.(interface{ CheckStores(*storage.Registry) error }); ok {
		return c.CheckStores(storage.Default)
	}
	return nil
}

// decodeUnbound decodes the defaults but those of the bound inputs.
func decodeUnbound(input reflect.Type, defaults map[string]any, bound []string) (reflect.Value, error) {
	unbound := maps.Clone(defaults)
	for _, name := range bound {
		delete(unbound, name)
	}
	v := reflect.New(input)
	data, err := json.Marshal(unbound)
	if err == nil {
		err = json.Unmarshal(data, v.Interface())
	}
	return v, err
}

// hasInput reports whether an input struct has a field (its own or an
// embedded struct's) that binds as name.
func hasInput(t reflect.Type, name string) bool {
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct && hasInput(f.Type, name) {
			return true
		}
		if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag == name {
			return true
		}
	}
	return false
}

// withBackendDefaults merges the bundle's backends: section under a task's
// own backend_options, backend by backend and key by key.
func withBackendDefaults(defaults map[string]any, backends map[string]map[string]any) map[string]any {
	out := make(map[string]any, len(defaults)+1)
	for k, v := range defaults {
		out[k] = v
	}
	own, _ := defaults["backend_options"].(map[string]any)
	merged := map[string]any{}
	for name, opts := range backends {
		m := map[string]any{}
		for k, v := range opts {
			m[k] = v
		}
		if o, ok := own[name].(map[string]any); ok {
			for k, v := range o {
				m[k] = v
			}
		}
		merged[name] = m
	}
	for name, o := range own {
		if _, done := merged[name]; !done {
			merged[name] = o
		}
	}
	out["backend_options"] = merged
	return out
}

// embeddedBundleConfig returns the bundle config packed into this executable's
// AFBNDL01 source region, or nil data when there is none.
func embeddedBundleConfig() (data []byte, source string, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, "", fmt.Errorf("finding this executable to read its packed bundle config: %w", err)
	}
	src, name, ok, err := footer.ReadSource(exe)
	if err != nil {
		return nil, "", fmt.Errorf("reading the bundle config packed into %s: %w", exe, err)
	}
	// Only a YAML source region is a bundle config: a bundle packed with
	// --source main.go carries Go source for display, not tasks to register.
	if !ok || len(src) == 0 || !isYAMLName(name) {
		return nil, "", nil
	}
	return src, name, nil
}

// isYAMLName reports whether a packed source's name marks it as YAML.
func isYAMLName(name string) bool {
	ext := strings.ToLower(filepath.Ext(name))
	return ext == ".yaml" || ext == ".yml"
}
