package protocol

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/pyenv"
)

// newInSchema34 are the fields and messages of ours that 2026-06-16 (the
// schema task SDK 1.3.2 ships) lacks: they exist from 2026-10-30 (Airflow
// 3.4, not released, so no schema file to check them against) and are sent
// only to a bundle or supervisor of that version.
var newInSchema34 = map[string]bool{
	"TaskState.retry_reason":                 true,
	"StartupDetails.ti_context.arg_bindings": true,
}

// TestMessagesMatchTheSupervisorSchema checks every message struct this
// module sends against the supervisor schema JSON the pinned task SDK
// ships: each field a property of the message (a misspelt tag fails here,
// not in an end-to-end run), each required property a field, each type one
// the schema allows (nullable only as a pointer or interface), nested
// messages recursively, and the type discriminator the schema's constant.
func TestMessagesMatchTheSupervisorSchema(t *testing.T) {
	defs := schemaDefs(t)
	for _, b := range []Body{
		&GetConnection{}, &GetVariable{}, &GetXCom{}, &SetXCom{}, &MaskSecret{}, &GetDagRunState{},
		&GetXComSequenceSlice{}, &SetRenderedFields{}, &SetRenderedMapIndex{}, &SkipDownstreamTasks{}, &GetAssetEventByAsset{},
		&SucceedTask{}, &RetryTask{}, &TaskState{}, &DeferTask{},
		&ConnectionResult{}, &VariableResult{}, &XComResult{}, &XComSequenceSliceResult{}, &DagRunStateResult{}, &ErrorResponse{}, &startupBody{},
	} {
		name := b.MessageType()
		def, ok := defs[name].(map[string]any)
		if !ok {
			t.Errorf("%s is not in the supervisor schema", name)
			continue
		}
		if c := prop(def, "type")["const"]; c != name {
			t.Errorf("%s: the schema's type constant is %v", name, c)
		}
		checkStruct(t, defs, name, reflect.TypeOf(b).Elem(), def)
	}
}

// The checker itself must fail on what it guards against.
func TestSchemaCheckCatchesMistakes(t *testing.T) {
	defs := schemaDefs(t)
	type misspelt struct {
		Header
		ConnId string `msgpack:"connid"`
	}
	type nullable struct {
		Header
		Key   string  `msgpack:"key"`
		Value *string `msgpack:"value"` // VariableResult.value is nullable: fine
	}
	type notNull struct {
		Header
		ConnID   string `msgpack:"conn_id"`
		ConnType string `msgpack:"conn_type"`
		Host     string `msgpack:"host"` // nullable in the schema, never null here
	}
	for _, c := range []struct {
		def  string
		typ  reflect.Type
		want string
	}{
		{"GetConnection", reflect.TypeFor[misspelt](), "connid"},
		{"GetConnection", reflect.TypeFor[misspelt](), "required conn_id"},
		{"ConnectionResult", reflect.TypeFor[notNull](), "required schema"},
		{"GetXCom", reflect.TypeFor[GetConnection](), "required key"},
	} {
		rec := &recorder{}
		checkStruct(rec, defs, c.def, c.typ, defs[c.def].(map[string]any))
		if !strings.Contains(strings.Join(rec.errs, "\n"), c.want) {
			t.Errorf("%s as %s: want a complaint about %q, got %q", c.typ, c.def, c.want, rec.errs)
		}
	}
	rec := &recorder{}
	checkStruct(rec, defs, "VariableResult", reflect.TypeFor[nullable](), defs["VariableResult"].(map[string]any))
	if len(rec.errs) > 0 {
		t.Errorf("a nullable property as a pointer is fine: %q", rec.errs)
	}
}

// reporter is what the checks report through: a *testing.T, or a recorder.
type reporter interface {
	Helper()
	Errorf(format string, a ...any)
}

type recorder struct{ errs []string }

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, a ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, a...))
}

// schemaDefs reads $defs of airflow/sdk/execution_time/schema/schema.json
// from the pinned venv.
func schemaDefs(t testing.TB) map[string]any {
	t.Helper()
	py := pyenv.Python(t)
	// Found, not imported: importing the task SDK takes seconds.
	out, err := exec.Command(py, "-c", `import importlib.util, os
for d in importlib.util.find_spec("airflow").submodule_search_locations:
    p = os.path.join(d, "sdk", "execution_time", "schema", "schema.json")
    if os.path.exists(p):
        print(p)
        break`).Output()
	if err != nil || len(out) == 0 {
		t.Fatalf("finding the task SDK's schema.json: %v", err)
	}
	data, err := os.ReadFile(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		APIVersion string         `json:"api_version"`
		Defs       map[string]any `json:"$defs"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.APIVersion != "2026-06-16" {
		t.Fatalf("the pinned task SDK ships schema %s; this test checks 2026-06-16 (Airflow 3.3)", doc.APIVersion)
	}
	return doc.Defs
}

func prop(def map[string]any, name string) map[string]any {
	props, _ := def["properties"].(map[string]any)
	p, _ := props[name].(map[string]any)
	return p
}

// checkStruct checks struct typ against the object schema def, at path.
func checkStruct(t reporter, defs map[string]any, path string, typ reflect.Type, def map[string]any) {
	t.Helper()
	props, _ := def["properties"].(map[string]any)
	if props == nil && def["additionalProperties"] == true {
		// An open object (SucceedTask.outlet_events' items): the
		// Execution API, not the schema, reads its keys; the tests of
		// the runtime check them.
		return
	}
	fields := wireFields(typ)
	for name, ft := range fields {
		at := path + "." + name
		p, ok := props[name].(map[string]any)
		switch {
		case newInSchema34[at]:
			if ok {
				t.Errorf("%s is in the 2026-06-16 schema now; drop it from newInSchema34", at)
			}
			continue
		case !ok:
			t.Errorf("%s: field %s is not a property of %s in the supervisor schema", path, name, path)
			continue
		}
		checkType(t, defs, at, ft, p)
	}
	required, _ := def["required"].([]any)
	for _, r := range required {
		if _, ok := fields[r.(string)]; !ok {
			t.Errorf("%s: the schema has required %s, which the struct lacks", path, r)
		}
	}
}

// wireFields are typ's msgpack field names and types, embedded structs
// flattened as msgpack inlines them.
func wireFields(typ reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
		if f.Anonymous && name == "" {
			for k, v := range wireFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" || name == "-" {
			continue
		}
		out[name] = f.Type
	}
	return out
}

// alternatives are the schemas p allows: its anyOf members, or p itself,
// with $refs resolved.
func alternatives(defs map[string]any, p map[string]any) []map[string]any {
	var out []map[string]any
	list := []any{p}
	if any, ok := p["anyOf"].([]any); ok {
		list = any
	}
	for _, a := range list {
		m, _ := a.(map[string]any)
		if ref, ok := m["$ref"].(string); ok {
			m, _ = defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)
		}
		out = append(out, m)
	}
	return out
}

var timeType = reflect.TypeFor[time.Time]()

// checkType checks that Go type ft can carry what schema p allows.
func checkType(t reporter, defs map[string]any, at string, ft reflect.Type, p map[string]any) {
	t.Helper()
	alts := alternatives(defs, p)
	types := map[string]map[string]any{}
	for _, a := range alts {
		switch ty := a["type"].(type) {
		case string:
			types[ty] = a
		case nil:
			types["any"] = a // JsonValue and the like
		}
	}
	nullable := types["null"] != nil || types["any"] != nil
	if ft.Kind() == reflect.Interface {
		return // any value: the sender picks one the schema allows
	}
	if ft.Kind() == reflect.Pointer {
		if !nullable {
			t.Errorf("%s: a pointer (it may be null), but the schema does not allow null", at)
		}
		ft = ft.Elem()
	} else if ft.Kind() == reflect.Slice || ft.Kind() == reflect.Map {
		// nil slices and maps go out as null: allowed only where null is,
		// unless the sender always fills them (checked by the realsdk run).
	} else if nullable && types["any"] == nil && len(types) == 1 {
		t.Errorf("%s: the schema allows only null", at)
	}
	want := ""
	switch {
	case ft == timeType:
		want = "string" // a datetime: a msgpack timestamp on the wire, validated as date-time
	case ft.Kind() == reflect.String:
		want = "string"
	case ft.Kind() == reflect.Bool:
		want = "boolean"
	case ft.Kind() >= reflect.Int && ft.Kind() <= reflect.Uint64:
		want = "integer"
	case ft.Kind() == reflect.Float64 || ft.Kind() == reflect.Float32:
		want = "number"
	case ft.Kind() == reflect.Slice:
		want = "array"
		if arr := types["array"]; arr != nil && ft.Elem().Kind() == reflect.Struct {
			// A list of messages: check each item's struct too.
			items, _ := arr["items"].(map[string]any)
			checkType(t, defs, at+"[]", ft.Elem(), items)
			return
		}
	case ft.Kind() == reflect.Map:
		want = "object"
	case ft.Kind() == reflect.Struct:
		obj := types["object"]
		if obj == nil {
			t.Errorf("%s: a struct, but the schema wants %s", at, keysOf(types))
			return
		}
		checkStruct(t, defs, at, ft, obj)
		return
	}
	if types[want] == nil && types["any"] == nil && !(want == "number" && types["integer"] != nil) {
		t.Errorf("%s: Go %s is JSON %s, but the schema wants %s", at, ft, want, keysOf(types))
	}
}

func keysOf(m map[string]map[string]any) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return strings.Join(ks, " or ")
}
