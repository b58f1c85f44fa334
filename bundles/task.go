package bundles

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/jinja"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
	"github.com/hashicorp/go-hclog"
)

// A registered task: the function, what it takes by type, its input struct's
// fields, and its options checked against them. Registration builds it once;
// each run binds its inputs (bind.go) and calls it.

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
