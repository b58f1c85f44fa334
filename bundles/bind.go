package bundles

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/hashicorp/go-hclog"
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
)

var (
	contextType   = reflect.TypeFor[context.Context]()
	errorType     = reflect.TypeFor[error]()
	loggerType    = reflect.TypeFor[hclog.Logger]()
	tiType        = reflect.TypeFor[TaskInstance]()
	dagRunType    = reflect.TypeFor[DagRun]()
	runtimeClient = reflect.TypeFor[*client]()
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
		case p.Kind() == reflect.Interface && p.NumMethod() > 0 && runtimeClient.Implements(p):
			k = paramClient
		case p.Kind() == reflect.Struct:
			k = paramInput
		case p.Kind() == reflect.Pointer && p.Elem().Kind() == reflect.Struct:
			k = paramInputPtr
		default:
			return nil, fmt.Errorf("parameter %d has type %s, which the runtime cannot provide (want context.Context, TaskInstance, DagRun, hclog.Logger, Client or a narrower interface, or one input struct)", i+1, p)
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
	argBindings []map[string]any
	conf        map[string]any
	// xcom resolves an upstream task's return_value in the current run.
	xcom func(ctx context.Context, taskID string) (any, error)
}

// sourced is a value and where it came from, for error messages.
type sourced struct {
	value  any
	source string
}

// fromDefault reports whether an arg_binding carries the stub function's own
// default value rather than something the Dag author passed.
func fromDefault(ab map[string]any) bool {
	v, _ := ab["from_default"].(bool)
	return v && ab["kind"] == "literal"
}

// bindInput builds the input struct value. Priority: the arguments the Dag
// author passed (arg_bindings), then dag_run.conf keys that name a field,
// then the stub's own parameter defaults (literals marked from_default), then
// the registered defaults. A stub default that no field claims is ignored, as
// in Airflow's Go SDK: adding a defaulted parameter to a stub must not break
// the Go task bound to it.
func (t *task) bindInput(ctx context.Context, src bindSources) (reflect.Value, error) {
	if t.inputType == nil {
		for _, ab := range src.argBindings {
			if fromDefault(ab) {
				continue
			}
			name, _ := ab["name"].(string)
			return reflect.Value{}, fmt.Errorf("argument %q was passed, but the task takes no input struct", name)
		}
		return reflect.Value{}, nil
	}
	values := map[int]sourced{}
	for name, v := range t.defaults {
		values[t.byFold[foldName(name)]] = sourced{v, "bundle defaults"}
	}
	for _, ab := range src.argBindings {
		name, _ := ab["name"].(string)
		if i, ok := t.byFold[foldName(name)]; ok && fromDefault(ab) {
			values[i] = sourced{ab["value"], fmt.Sprintf("the stub's default for %q", name)}
		}
	}
	keys := make([]string, 0, len(src.conf))
	for k := range src.conf {
		keys = append(keys, k)
	}
	sort.Strings(keys) // deterministic when two conf keys fold to one field
	for _, k := range keys {
		if i, ok := t.byFold[foldName(k)]; ok {
			values[i] = sourced{src.conf[k], fmt.Sprintf("dag_run.conf[%q]", k)}
		}
	}
	for n, ab := range src.argBindings {
		name, _ := ab["name"].(string)
		if name == "" {
			return reflect.Value{}, fmt.Errorf("arg_bindings[%d] has no name", n)
		}
		if fromDefault(ab) {
			continue // bound above, below dag_run.conf
		}
		i, ok := t.byFold[foldName(name)]
		if !ok {
			return reflect.Value{}, fmt.Errorf("argument %q matches no input field (fields: %s)", name, t.fieldList())
		}
		kind, _ := ab["kind"].(string)
		switch kind {
		case "literal":
			values[i] = sourced{ab["value"], fmt.Sprintf("argument %q", name)}
		case "xcom":
			up, _ := ab["task_id"].(string)
			if up == "" {
				return reflect.Value{}, fmt.Errorf("argument %q is an xcom binding without task_id", name)
			}
			v, err := src.xcom(ctx, up)
			if errors.Is(err, ErrXComNotFound) {
				// Typical under trigger rule all_done after the upstream failed.
				return reflect.Value{}, fmt.Errorf("argument %q: upstream task %q pushed no return_value in this run (did it fail or get skipped?): %w", name, up, err)
			}
			if err != nil {
				return reflect.Value{}, fmt.Errorf("argument %q: reading return_value of upstream task %q: %w", name, up, err)
			}
			values[i] = sourced{v, fmt.Sprintf("argument %q (XCom return_value of %q)", name, up)}
		default:
			return reflect.Value{}, fmt.Errorf("argument %q has unknown binding kind %q (want literal or xcom)", name, kind)
		}
	}
	out := reflect.New(t.inputType).Elem()
	for i, sv := range values {
		f := t.fields[i]
		if err := convertInto(out.FieldByIndex(f.index), sv.value); err != nil {
			return reflect.Value{}, fmt.Errorf("input field %q from %s: %v", f.name, sv.source, err)
		}
	}
	return out, nil
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
	ctx    context.Context
	ti     TaskInstance
	dagRun DagRun
	logger hclog.Logger
	client *client
	input  reflect.Value
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
