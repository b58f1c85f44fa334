package bundles

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/jinja"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// paramKind says what the runtime injects for one function parameter.
type paramKind int

const (
	paramContext paramKind = iota
	paramTI
	paramTIPtr
	paramDagRun
	paramDagRunPtr
	paramLogger
	paramClient
	paramInput
	paramInputPtr
	paramOutlets
)

var (
	contextType   = reflect.TypeFor[context.Context]()
	errorType     = reflect.TypeFor[error]()
	loggerType    = reflect.TypeFor[hclog.Logger]()
	tiType        = reflect.TypeFor[TaskInstance]()
	dagRunType    = reflect.TypeFor[DagRun]()
	runtimeClient = reflect.TypeFor[*client]()
	outletsType   = reflect.TypeFor[*Outlets]()
)

// inputField is one bindable field of the input struct.
type inputField struct {
	name  string // json name, as declared
	fold  string // foldName(name)
	index []int  // reflect.Value.FieldByIndex path; embedded structs promote their fields
	typ   reflect.Type
}

type task struct {
	fn        reflect.Value
	params    []paramKind
	inputType reflect.Type // struct type, nil when none
	fields    []inputField
	byFold    map[string]int // fold -> index into fields
	returnsT  bool
	defaults  map[string]any // keyed by field name
	// bound maps a field index to where its value comes from at run time
	// (bundle config inputs:, WithXCom, WithParam).
	bound map[int]inputBinding
	// confAllowed holds the fields a run's dag_run.conf may set under their
	// own names (bundle config conf:, AllowConf).
	confAllowed map[int]bool
	// confHint, when set, is what a refused conf key's error advises
	// (WithConfHint).
	confHint string
	// outlets and aliases are the stub's outlets (WithOutlets,
	// WithOutletAliases).
	outlets []Asset
	aliases []string
	// mapIndexTemplate renders the mapped instance's name from its inputs.
	mapIndexTemplate string
	mappedDownstream bool
	// noOwnElement: it takes its TaskInstance without picking its element
	// by map index (taskinfo.NoOwnElement).
	noOwnElement bool
	// attributes are the stub attributes the Go side declares.
	attributes
}

func newTask(fn any, o taskOptions) (*task, error) {
	v := reflect.ValueOf(fn)
	if !v.IsValid() || v.Kind() != reflect.Func {
		return nil, fmt.Errorf("want a function, got %T", fn)
	}
	if v.IsNil() {
		return nil, errors.New("function is nil")
	}
	ft := v.Type()
	if ft.IsVariadic() {
		return nil, errors.New("variadic functions cannot be tasks")
	}
	t := &task{fn: v}
	switch ft.NumOut() {
	case 1:
		if ft.Out(0) != errorType {
			return nil, fmt.Errorf("must return error or (T, error), returns %s", ft.Out(0))
		}
	case 2:
		if ft.Out(1) != errorType {
			return nil, fmt.Errorf("must return error or (T, error), second result is %s", ft.Out(1))
		}
		t.returnsT = true
	default:
		return nil, fmt.Errorf("must return error or (T, error), returns %d values", ft.NumOut())
	}
	for i := 0; i < ft.NumIn(); i++ {
		p := ft.In(i)
		var k paramKind
		switch {
		case p == contextType:
			k = paramContext
		case p == tiType:
			k = paramTI
		case p == reflect.PointerTo(tiType):
			k = paramTIPtr
		case p == dagRunType:
			k = paramDagRun
		case p == reflect.PointerTo(dagRunType):
			k = paramDagRunPtr
		case p == loggerType:
			k = paramLogger
		case p == outletsType:
			k = paramOutlets
		case p.Kind() == reflect.Interface && p.NumMethod() > 0 && runtimeClient.Implements(p):
			k = paramClient
		case p.Kind() == reflect.Struct:
			k = paramInput
		case p.Kind() == reflect.Pointer && p.Elem().Kind() == reflect.Struct:
			k = paramInputPtr
		default:
			return nil, fmt.Errorf("parameter %d has type %s, which the runtime cannot provide (want context.Context, TaskInstance, DagRun, hclog.Logger, *Outlets, Client or a narrower interface, or one input struct)", i+1, p)
		}
		if k == paramInput || k == paramInputPtr {
			if t.inputType != nil {
				return nil, fmt.Errorf("parameter %d: only one input struct is allowed, already have %s", i+1, t.inputType)
			}
			t.inputType = p
			if k == paramInputPtr {
				t.inputType = p.Elem()
			}
		}
		t.params = append(t.params, k)
	}
	if t.inputType != nil {
		if err := t.indexFields(); err != nil {
			return nil, err
		}
		if len(t.fields) == 0 {
			return nil, fmt.Errorf("input struct %s has no exported fields to bind", t.inputType)
		}
	}
	if err := t.addSources(o); err != nil {
		return nil, err
	}
	if err := t.addDataModel(o); err != nil {
		return nil, err
	}
	if err := t.attributes.check(o, t.returnsT); err != nil {
		return nil, err
	}
	if len(o.defaults) > 0 {
		t.defaults = map[string]any{}
		for k, v := range o.defaults {
			i, ok := t.byFold[foldName(k)]
			if !ok {
				return nil, fmt.Errorf("default %q matches no input field (fields: %s)", k, t.fieldList())
			}
			// Check the type now: a bad default is a registration error
			// naming the field, not a failure of every later task run.
			f := t.fields[i]
			if err := convertInto(reflect.New(f.typ).Elem(), v); err != nil {
				return nil, fmt.Errorf("default %q: %v", k, err)
			}
			t.defaults[f.name] = v
		}
	}
	return t, nil
}

// addSources checks and indexes the input bindings and the conf allowlist:
// each must name an input field, and an input has at most one binding.
func (t *task) addSources(o taskOptions) error {
	if t.inputType == nil {
		if len(o.bindings) > 0 || len(o.allowConf) > 0 || o.mapIndexTemplate != "" {
			return errors.New("input bindings, conf and a map index template need an input struct, and the function takes none")
		}
		return nil
	}
	expanded := ""
	for _, b := range o.bindings {
		var err error
		if b.input, b.entry, err = splitEntry(b.input); err != nil {
			return err
		}
		i, ok := t.byFold[foldName(b.input)]
		if !ok {
			return fmt.Errorf("input %q (bound to %s) matches no input field (fields: %s)", b.input, b.describe(), t.fieldList())
		}
		if typ := t.fields[i].typ; b.entry != "" && (typ.Kind() != reflect.Map || typ.Key().Kind() != reflect.String) {
			return fmt.Errorf("input %s[%s]: [%s] names an entry of a mapping, and %s is %s; bind the whole input (%s) instead", b.input, b.entry, b.entry, t.fields[i].name, jsonKind(typ), t.fields[i].name)
		}
		sources := 0
		for _, set := range []bool{b.xcomTask != "", b.param != "", b.hasItems, b.asset != "", b.hasTemplate} {
			if set {
				sources++
			}
		}
		switch {
		case sources == 0:
			return fmt.Errorf("input %q: give {xcom: <upstream task_id>}, {param: <name>}, {expand: [...]}, {asset_event: <asset uri or name>} or {template: \"...{{ ds }}...\"}", b.input)
		case sources > 1:
			return fmt.Errorf("input %q is bound to %s: give one source (xcom, param, expand, asset_event or template)", b.input, b.describe())
		case b.expand && b.mapped:
			return fmt.Errorf("input %q: expand (this task is mapped over the list) and mapped (the upstream is mapped) exclude each other", b.input)
		case b.field != "" && b.asset == "":
			return fmt.Errorf("input %q: field %q reads an asset event; it needs asset_event: <asset uri or name> beside it", b.input, b.field)
		case b.expand && expanded != "":
			return fmt.Errorf("inputs %q and %q both expand: Airflow maps a task over the cross product of several expanded arguments, which the bundle does not reproduce; expand over one list (of records, if each instance needs several values) and bind it to one input", expanded, b.input)
		case b.xcomTask != "" && !validID(b.xcomTask):
			return fmt.Errorf("input %q: xcom %q is not a task id (1-250 letters, digits, '_', '-' or '.')", b.input, b.xcomTask)
		case b.xcomTask != "" && b.xcomKey == "":
			return fmt.Errorf("input %q: the XCom key is empty; leave key out for return_value", b.input)
		}
		if b.hasTemplate {
			if k := t.fields[i].typ.Kind(); k != reflect.String && k != reflect.Interface && b.entry == "" {
				return fmt.Errorf("input %q: a template renders a string, and %s is %s", b.input, t.fields[i].name, jsonKind(t.fields[i].typ))
			}
			if err := jinja.Check(b.template); err != nil {
				return fmt.Errorf("input %q: %w", b.input, err)
			}
		}
		if b.expand {
			expanded = b.input
		}
		if prev, dup := t.bound[i]; dup {
			return fmt.Errorf("input %q is bound twice (%s and %s); keep one (an input takes one binding, also when it names an entry)", t.fields[i].name, prev.describe(), b.describe())
		}
		if t.bound == nil {
			t.bound = map[int]inputBinding{}
		}
		t.bound[i] = b
	}
	for _, name := range o.allowConf {
		i, ok := t.byFold[foldName(name)]
		if !ok {
			return fmt.Errorf("conf lists %q, which matches no input field (fields: %s)", name, t.fieldList())
		}
		if t.confAllowed == nil {
			t.confAllowed = map[int]bool{}
		}
		t.confAllowed[i] = true
	}
	t.confHint = o.confHint
	return nil
}

// addDataModel checks and keeps the task's outlets and map index template.
func (t *task) addDataModel(o taskOptions) error {
	seen := map[protocol.AssetKey]bool{}
	for _, a := range o.outlets {
		if a.Name == "" && a.URI == "" {
			return errors.New("an outlet asset needs a uri or a name")
		}
		if seen[a.Unique()] {
			return fmt.Errorf("outlet %s is declared twice", a)
		}
		seen[a.Unique()] = true
	}
	for _, a := range o.aliases {
		if a == "" {
			return errors.New("an outlet asset alias needs a name")
		}
	}
	t.outlets, t.aliases, t.mappedDownstream = o.outlets, o.aliases, o.mappedDownstream
	if o.mapIndexTemplate != "" {
		if _, err := t.renderMapIndex(o.mapIndexTemplate, nil); err != nil {
			return err
		}
		t.mapIndexTemplate = o.mapIndexTemplate
	}
	return nil
}

// renderMapIndex fills template's {input} placeholders from the bound
// input values (nil checks the names only).
func (t *task) renderMapIndex(template string, values map[string]any) (string, error) {
	var out strings.Builder
	rest := template
	for {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			out.WriteString(rest)
			return out.String(), nil
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return "", fmt.Errorf("map index template %q: an unclosed {", template)
		}
		name := rest[open+1 : open+end]
		// {field[entry]}: one entry of a mapping input.
		field, entry, err := splitEntry(name)
		if err != nil {
			return "", fmt.Errorf("map index template %q: %w", template, err)
		}
		i, ok := t.byFold[foldName(field)]
		if !ok {
			return "", fmt.Errorf("map index template %q: {%s} names no input field (fields: %s)", template, name, t.fieldList())
		}
		out.WriteString(rest[:open])
		v := values[t.fields[i].name]
		if m, isMap := v.(map[string]any); isMap && entry != "" {
			v = m[entry]
		}
		switch v := v.(type) {
		case nil:
		case string:
			out.WriteString(v)
		default:
			data, _ := json.Marshal(v)
			out.Write(data)
		}
		rest = rest[open+end+1:]
	}
}

func (t *task) indexFields() error {
	t.byFold = map[string]int{}
	return t.addFields(t.inputType, nil)
}

// addFields indexes typ's exported fields. An embedded struct without a
// json name contributes its own fields, as with encoding/json, so task
// inputs can share field groups (e.g. the backend options).
func (t *task) addFields(typ reflect.Type, prefix []int) error {
	for i := 0; i < typ.NumField(); i++ {
		sf := typ.Field(i)
		index := append(append([]int(nil), prefix...), i)
		tagName, hasTag := "", false
		if tag, ok := sf.Tag.Lookup("json"); ok {
			tagName, _, _ = strings.Cut(tag, ",")
			hasTag = tagName != ""
			if tagName == "-" {
				continue
			}
		}
		if sf.Anonymous && !hasTag && sf.Type.Kind() == reflect.Struct {
			if err := t.addFields(sf.Type, index); err != nil {
				return err
			}
			continue
		}
		if !sf.IsExported() {
			continue
		}
		name := sf.Name
		if hasTag {
			name = tagName
		}
		fold := foldName(name)
		if prev, dup := t.byFold[fold]; dup {
			return fmt.Errorf("input fields %q and %q have the same name once case and underscores are ignored", t.fields[prev].name, name)
		}
		t.byFold[fold] = len(t.fields)
		t.fields = append(t.fields, inputField{name: name, fold: fold, index: index, typ: sf.Type})
	}
	return nil
}

func (t *task) fieldList() string {
	if len(t.fields) == 0 {
		return "none"
	}
	names := make([]string, len(t.fields))
	for i, f := range t.fields {
		names[i] = f.name
	}
	return strings.Join(names, ", ")
}

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
// defaults and succeed having processed nothing. A task whose function takes
// its TaskInstance can read its map index itself, and is let through, unless
// its registrar says it does not (taskinfo.NoOwnElement: the standard
// catalogue's kinds).
func (t *task) checkMapped(ti TaskInstance) error {
	if ti.MapIndex < 0 || t.readsOwnElement() {
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

// readsOwnElement says the function may pick its element by map index
// itself: it takes its TaskInstance and does not say otherwise.
func (t *task) readsOwnElement() bool {
	takesTI := slices.Contains(t.params, paramTI) || slices.Contains(t.params, paramTIPtr)
	return takesTI && !t.noOwnElement
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

// invocation is what one run of a task gets injected.
type invocation struct {
	ctx     context.Context
	ti      TaskInstance
	dagRun  DagRun
	logger  hclog.Logger
	client  *client
	input   reflect.Value
	outlets *Outlets
}

// call runs the function. A panic is recovered into an error carrying the
// value; the stack goes to the logger.
func (t *task) call(inv invocation) (result any, hasResult bool, err error) {
	args := make([]reflect.Value, len(t.params))
	ft := t.fn.Type()
	for i, k := range t.params {
		switch k {
		case paramContext:
			args[i] = reflect.ValueOf(&inv.ctx).Elem()
		case paramTI:
			args[i] = reflect.ValueOf(inv.ti)
		case paramTIPtr:
			ti := inv.ti
			args[i] = reflect.ValueOf(&ti)
		case paramDagRun:
			args[i] = reflect.ValueOf(inv.dagRun)
		case paramDagRunPtr:
			dr := inv.dagRun
			args[i] = reflect.ValueOf(&dr)
		case paramLogger:
			args[i] = reflect.ValueOf(&inv.logger).Elem()
		case paramOutlets:
			args[i] = reflect.ValueOf(inv.outlets)
		case paramClient:
			args[i] = reflect.ValueOf(inv.client).Convert(ft.In(i))
		case paramInput:
			args[i] = inv.input
		case paramInputPtr:
			p := reflect.New(t.inputType)
			p.Elem().Set(inv.input)
			args[i] = p
		}
	}
	outs := t.fn.Call(args)
	errV := outs[len(outs)-1]
	if !errV.IsNil() {
		err = errV.Interface().(error)
	}
	if t.returnsT {
		r := outs[0]
		switch r.Kind() {
		case reflect.Pointer, reflect.Interface:
			if r.IsNil() {
				return nil, false, err
			}
		}
		return r.Interface(), true, err
	}
	return nil, false, err
}
