package bundles

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/jinja"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// Binding a task's inputs at run time, from the sources a run offers (the
// stub call's arguments, XComs, the run's conf, asset events, the mapped
// element), in the order the registration (task.go) fixed. It reads the data
// model (assets.go) and the template renderer, never the other way round.

// bindSources are where input values come from, in priority order.
type bindSources struct {
	ref         taskRef // for messages that say where to allow a conf key
	argBindings []protocol.ArgBinding
	conf        map[string]any
	// xcom resolves an XCom of another task in the current run; mapped
	// the XComs of every mapped instance of one.
	xcom   func(ctx context.Context, taskID, key string) (any, error)
	mapped func(ctx context.Context, taskID, key string) ([]any, error)
	// mapIndex is the task instance's (-1 unmapped); events the asset
	// events that triggered the run, oldest first.
	mapIndex int
	events   []AssetEvent
	// templateValues are what templates render (jinja.Values).
	templateValues map[string]string
	// bound, when set, receives each input's final value source.
	bound func(sources map[string]string)
}

// sourced is a value and where it came from, for error messages.
type sourced struct {
	value  any
	source string
}

// fromDefault reports whether an arg_binding carries the stub function's own
// default value rather than something the Dag author passed.
func fromDefault(ab protocol.ArgBinding) bool {
	return ab.FromDefault && ab.Kind == protocol.BindLiteral
}

// bindInput builds the input struct value. Priority, highest first: the
// arguments the Dag author passed in the stub call (arg_bindings; Airflow
// 3.4), the task's input bindings (an upstream XCom, a Dag param), the
// dag_run.conf keys the task allows, the stub's own parameter defaults
// (literals marked from_default), the registered defaults.
//
// dag_run.conf is whatever the triggering user typed, so by default it sets
// nothing: a conf key that names an input the task neither allows nor binds
// to a param fails the task here, before anything ran. Conf keys naming no
// input are ignored (other tasks of the Dag may use them). A stub default
// that no field claims is ignored too, as in Airflow's Go SDK: adding a
// defaulted parameter to a stub must not break the Go task bound to it.
func (t *task) bindInput(ctx context.Context, src bindSources) (reflect.Value, error) {
	if t.inputType == nil {
		for _, ab := range src.argBindings {
			if fromDefault(ab) {
				continue
			}
			return reflect.Value{}, fmt.Errorf("argument %q was passed, but the task takes no input struct", ab.Name)
		}
		return reflect.Value{}, nil
	}
	values := map[int]sourced{}
	for name, v := range t.defaults {
		values[t.byFold[foldName(name)]] = sourced{v, "bundle defaults"}
	}
	for _, ab := range src.argBindings {
		if i, ok := t.byFold[foldName(ab.Name)]; ok && fromDefault(ab) {
			values[i] = sourced{ab.Value, fmt.Sprintf("the stub's default for %q", ab.Name)}
		}
	}
	if err := t.bindConf(src, values); err != nil {
		return reflect.Value{}, err
	}
	passed, err := t.passedArgs(src.argBindings)
	if err != nil {
		return reflect.Value{}, err
	}
	if err := t.resolveBindings(ctx, src, passed, values); err != nil {
		return reflect.Value{}, err
	}
	for _, ab := range src.argBindings { // in order: deterministic requests
		if fromDefault(ab) {
			continue
		}
		name, up := ab.Name, ab.TaskID
		i := t.byFold[foldName(name)] // passedArgs checked it
		switch ab.Kind {
		case protocol.BindLiteral:
			values[i] = sourced{ab.Value, fmt.Sprintf("argument %q", name)}
		case protocol.BindXCom:
			v, err := src.xcom(ctx, up, protocol.ReturnValueKey)
			if errors.Is(err, ErrXComNotFound) {
				// Typical in a teardown (or under all_done) after the upstream failed.
				return reflect.Value{}, fmt.Errorf("argument %q: upstream task %q pushed no return_value in this run (did it fail or get skipped?): %w", name, up, err)
			}
			if err != nil {
				return reflect.Value{}, fmt.Errorf("argument %q: reading return_value of upstream task %q: %w", name, up, err)
			}
			values[i] = sourced{v, fmt.Sprintf("argument %q (XCom return_value of %q)", name, up)}
		}
	}
	out := reflect.New(t.inputType).Elem()
	sources := make(map[string]string, len(values))
	for i, sv := range values {
		f := t.fields[i]
		if err := convertInto(out.FieldByIndex(f.index), sv.value); err != nil {
			return reflect.Value{}, fmt.Errorf("input field %q from %s: %v", f.name, sv.source, err)
		}
		sources[f.name] = sv.source
	}
	if src.bound != nil {
		src.bound(sources)
	}
	return out, nil
}

// bindConf applies the dag_run.conf keys the task allows and refuses the
// ones that name an input it does not allow. Param-bound keys are left to
// resolveBindings.
func (t *task) bindConf(src bindSources, values map[int]sourced) error {
	params := map[string]bool{}
	for _, b := range t.bound {
		if b.param != "" {
			params[b.param] = true
		}
	}
	keys := make([]string, 0, len(src.conf))
	for k := range src.conf {
		keys = append(keys, k)
	}
	sort.Strings(keys) // deterministic when two conf keys fold to one field
	var refused []string
	for _, k := range keys {
		i, ok := t.byFold[foldName(k)]
		switch {
		case !ok:
		case t.confAllowed[i]:
			values[i] = sourced{src.conf[k], fmt.Sprintf("dag_run.conf[%q]", k)}
		case !params[k]:
			refused = append(refused, k)
		}
	}
	if len(refused) == 0 {
		return nil
	}
	fields := make([]string, len(refused))
	for n, k := range refused {
		fields[n] = t.fields[t.byFold[foldName(k)]].name
	}
	return &confNotAllowedError{Task: src.ref, Keys: refused, Inputs: fields, Hint: t.confHint}
}

// confNotAllowedError is a dag_run.conf that tries to set inputs the task
// does not let a run set. The task fails before it runs.
type confNotAllowedError struct {
	Task   taskRef
	Keys   []string // the conf keys, as written
	Inputs []string // the input fields they name
	// Hint replaces the advice to list the inputs under conf: (WithConfHint).
	Hint string
}

func (e *confNotAllowedError) Error() string {
	quoted := make([]string, len(e.Keys))
	for i, k := range e.Keys {
		quoted[i] = strconv.Quote(k)
	}
	what := "key " + quoted[0] + " names an input"
	if len(quoted) > 1 {
		what = "keys " + strings.Join(quoted, ", ") + " name inputs"
	}
	refused := fmt.Sprintf("dag_run.conf %s of task %s.%s that a Dag run may not set", what, e.Task.DagID, e.Task.TaskID)
	if e.Hint != "" {
		return refused + "; " + e.Hint
	}
	goNames := make([]string, len(e.Inputs))
	for i, n := range e.Inputs {
		goNames[i] = strconv.Quote(n)
	}
	return refused + fmt.Sprintf(" (by default dag_run.conf sets nothing, so whoever triggers a run cannot choose what the task reads, runs or touches); "+
		"if the Dag author wants triggers to set them, add conf: [%s] under dags.%s.tasks.%s in the bundle config (Go bundles: bundles.AllowConf(%s)), otherwise remove them from the run's conf",
		strings.Join(e.Inputs, ", "), e.Task.DagID, e.Task.TaskID, strings.Join(goNames, ", "))
}

// passedArgs checks the arguments the Dag author passed (arg_bindings that
// are not stub defaults) and indexes them by field.
func (t *task) passedArgs(argBindings []protocol.ArgBinding) (map[int]protocol.ArgBinding, error) {
	passed := map[int]protocol.ArgBinding{}
	for n, ab := range argBindings {
		name := ab.Name
		if name == "" {
			return nil, fmt.Errorf("arg_bindings[%d] has no name", n)
		}
		if fromDefault(ab) {
			continue // bound below dag_run.conf
		}
		i, ok := t.byFold[foldName(name)]
		if !ok {
			return nil, fmt.Errorf("argument %q matches no input field (fields: %s)", name, t.fieldList())
		}
		switch ab.Kind {
		case protocol.BindLiteral:
		case protocol.BindXCom:
			if ab.TaskID == "" {
				return nil, fmt.Errorf("argument %q is an xcom binding without task_id", name)
			}
		default:
			return nil, fmt.Errorf("argument %q has unknown binding kind %q (want literal or xcom)", name, ab.Kind)
		}
		passed[i] = ab
	}
	return passed, nil
}

// resolveBindings resolves the task's input bindings, except for inputs the
// stub call passed (those win, and their XCom need not be read twice).
func (t *task) resolveBindings(ctx context.Context, src bindSources, passed map[int]protocol.ArgBinding, values map[int]sourced) error {
	idx := make([]int, 0, len(t.bound))
	for i := range t.bound {
		idx = append(idx, i)
	}
	sort.Ints(idx) // read XComs in field order: deterministic requests
	for _, i := range idx {
		b := t.bound[i]
		if _, ok := passed[i]; ok {
			continue
		}
		name := t.fields[i].name
		sv, ok, err := t.resolveBinding(ctx, src, b, name)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if b.entry != "" {
			if sv, err = withEntry(values[i], b.entry, sv); err != nil {
				return fmt.Errorf("input %q (bound to %s): %w", name, b.describe(), err)
			}
		}
		values[i] = sv
	}
	return nil
}

// resolveBinding resolves one input binding; ok is false when the run
// leaves the input unset (a param the conf does not set, no event of the
// asset).
func (t *task) resolveBinding(ctx context.Context, src bindSources, b inputBinding, name string) (sourced, bool, error) {
	if b.param != "" {
		v, ok := src.conf[b.param]
		return sourced{v, fmt.Sprintf("dag_run.conf[%q] (%s)", b.param, b.describe())}, ok, nil
	}
	if b.hasTemplate {
		v, err := jinja.Render(b.template, src.templateValues, src.conf)
		if err != nil {
			return sourced{}, false, fmt.Errorf("input %q: %w", name, err)
		}
		return sourced{v, fmt.Sprintf("the template %s", b.describe())}, true, nil
	}
	if b.asset != "" || b.hasItems || b.mapped {
		sv, ok, err := t.resolveDataModel(ctx, src, b)
		if err != nil {
			return sourced{}, false, fmt.Errorf("input %q (bound to %s): %w", name, b.describe(), err)
		}
		return sv, ok, nil
	}
	v, err := src.xcom(ctx, b.xcomTask, b.xcomKey)
	if errors.Is(err, ErrXComNotFound) {
		// Typical in a teardown (or under all_done) after the upstream failed.
		return sourced{}, false, fmt.Errorf("input %q is bound to %s, but task %q pushed no %s XCom in this run (did it fail or get skipped? see its log): %w", name, b.describe(), b.xcomTask, b.xcomKey, err)
	}
	if err != nil {
		return sourced{}, false, fmt.Errorf("input %q (bound to %s): reading the %s XCom of task %q: %w", name, b.describe(), b.xcomKey, b.xcomTask, err)
	}
	if b.expand {
		sv, err := element(v, src.mapIndex, fmt.Sprintf("the %s XCom of %q", b.xcomKey, b.xcomTask))
		if err != nil {
			return sourced{}, false, fmt.Errorf("input %q (bound to %s): %w", name, b.describe(), err)
		}
		return sv, true, nil
	}
	return sourced{v, fmt.Sprintf("the %s XCom of %q (%s)", b.xcomKey, b.xcomTask, b.describe())}, true, nil
}

// withEntry is mapping base (the defaults', the conf's, or none) with its
// entry key set to sv's value.
func withEntry(base sourced, key string, sv sourced) (sourced, error) {
	m := map[string]any{}
	switch v := base.value.(type) {
	case nil:
	case map[string]any:
		maps.Copy(m, v)
	default:
		return sourced{}, fmt.Errorf("[%s] sets an entry of a mapping, but %s gives the input a %s; give a mapping there, or bind the whole input", key, base.source, jsonKindOf(v))
	}
	m[key] = sv.value
	source := fmt.Sprintf("entry %q from %s", key, sv.source)
	if base.source != "" {
		source = base.source + ", " + source
	}
	return sourced{m, source}, nil
}

// resolveDataModel resolves an expand-over-literal, mapped-upstream or
// asset-event binding; ok is false when the run leaves the input unset
// (no event of the asset triggered it).
func (t *task) resolveDataModel(ctx context.Context, src bindSources, b inputBinding) (sourced, bool, error) {
	switch {
	case b.hasItems:
		sv, err := element(b.items, src.mapIndex, "the expand list")
		return sv, err == nil, err
	case b.mapped:
		list, err := src.mapped(ctx, b.xcomTask, b.xcomKey)
		if err != nil {
			return sourced{}, false, fmt.Errorf("reading the %s XComs of mapped task %q: %w", b.xcomKey, b.xcomTask, err)
		}
		return sourced{list, fmt.Sprintf("the %s XComs of the %d mapped instances of %q", b.xcomKey, len(list), b.xcomTask)}, true, nil
	}
	var picked []any
	from := ""
	for _, e := range src.events {
		if !assetMatches(e.Asset, b.asset) {
			continue
		}
		v, ok := lookupPath(eventFields(e), b.field)
		if !ok {
			return sourced{}, false, FailNoRetry(fmt.Errorf("the triggering event of %s (from %s/%s) has no %s; its extra has keys [%s]", e.Asset, e.SourceDagID, e.SourceRunID, b.field, strings.Join(sortedKeys(e.Extra), ", ")))
		}
		if err := tooDeepEvent(e, b.field, v); err != nil {
			return sourced{}, false, FailNoRetry(err)
		}
		picked = append(picked, v)
		from = fmt.Sprintf("the asset event of %s from %s/%s (%s)", e.Asset, e.SourceDagID, e.SourceRunID, b.describe())
	}
	switch {
	case len(picked) == 0:
		return sourced{}, false, nil
	case b.all:
		return sourced{picked, fmt.Sprintf("%d asset events of %q (%s)", len(picked), b.asset, b.describe())}, true, nil
	}
	return sourced{picked[len(picked)-1], from}, true, nil
}

// checkMapped refuses a mapped task instance of a task that takes no
// mapped element: Airflow 3.3 hands an executable task no element, so such
// an instance (of .expand_kwargs(), of a second expanded argument, of an
// expansion over an input the bundle does not map) would run with its
// defaults and succeed having processed nothing, over and over. A task
// takes its element only through an expanded input (WithExpandXCom,
// WithExpandItems), whatever else it reads (its TaskInstance's map index
// names the instance; it does not say what to process).
func (t *task) checkMapped(ti TaskInstance) error {
	if ti.MapIndex < 0 {
		return nil
	}
	for _, b := range t.bound {
		if b.expand {
			return nil
		}
	}
	return FailNoRetry(fmt.Errorf("this task instance is mapped (map_index %d), but task %s.%s takes no mapped element: Airflow 3.3 hands a Go task no element, so it would run with empty inputs. "+
		"Map one input: in the bundle config bind it with {xcom: <upstream task>, expand: true} (stub.expand(<input>=upstream())) or {expand: [...]} (a literal list); in Go, bundles.WithExpandXCom or WithExpandItems. "+
		".expand_kwargs() and expanding several arguments cannot be followed: expand one argument over a list of records instead", ti.MapIndex, ti.DagID, ti.TaskID))
}

// element is this mapped instance's element of list.
func element(list any, mapIndex int, what string) (sourced, error) {
	l, ok := list.([]any)
	switch {
	case mapIndex < 0:
		return sourced{}, FailNoRetry(fmt.Errorf("this task instance is not mapped (map_index -1), so it has no element of %s; expand the stub task in the Dag (stub.expand(<input>=...)) or bind the input without expand", what))
	case !ok:
		return sourced{}, FailNoRetry(fmt.Errorf("%s is a %s, not a list to take element %d of", what, jsonKindOf(list), mapIndex))
	case mapIndex >= len(l):
		return sourced{}, FailNoRetry(fmt.Errorf("map index %d is past the end of %s (%d elements): the Dag maps over another list than the bundle reads; make them the same (check compares them)", mapIndex, what, len(l)))
	}
	return sourced{l[mapIndex], fmt.Sprintf("element %d of %s", mapIndex, what)}, nil
}

func jsonKindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "mapping"
	case string:
		return "string"
	case bool:
		return "boolean"
	}
	return fmt.Sprintf("%T", v)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// convertInto sets dst from v through a JSON round trip, so nested maps,
// slices, structs and types with UnmarshalJSON all work, and a mismatch is
// a clear error instead of a reflect panic.
func convertInto(dst reflect.Value, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("value is not JSON-encodable: %v", err)
	}
	ptr := reflect.New(dst.Type())
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(ptr.Interface()); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			// Say what the user must write, in JSON/YAML terms, not Go's.
			if ute.Field != "" {
				return fmt.Errorf("cannot use %s: %q must be %s, not a JSON %s", abbreviate(data), ute.Field, jsonKind(ute.Type), ute.Value)
			}
			return fmt.Errorf("cannot use JSON %s %s: want %s", ute.Value, abbreviate(data), jsonKind(dst.Type()))
		}
		return fmt.Errorf("cannot use %s as %s: %v", abbreviate(data), dst.Type(), err)
	}
	dst.Set(ptr.Elem())
	return nil
}

// jsonKind names a Go type as the JSON (or YAML) value a user writes for it.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping ({key: value, ...})"
	}
	return t.String()
}

func abbreviate(b []byte) string {
	if len(b) > 60 {
		return string(b[:57]) + "..."
	}
	return string(b)
}
