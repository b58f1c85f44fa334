package catalogue

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
)

// Every problem with the file's shape is one line in the config's terms:
// the file, the line, the place (Dag, task, key), what is wrong and what
// to write instead.
func TestShapeErrorsSayWhereAndWhatToWrite(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"top level is a list", "- dags\n",
			`c.yaml: line 1: the file holds dags: {<dag_id>: {tasks: {<task_id>: {kind: ..., defaults: {...}}}}}, not a list`},
		{"dags is a list", "dags: [d]\n",
			`c.yaml: line 1: dags: dags is a mapping of dag_id to its Dag, such as {<dag_id>: {tasks: {<task_id>: {kind: ...}}}}, not a list`},
		{"a Dag is a value", "dags: {d: x}\n",
			`c.yaml: line 1: dags.d: a Dag is a mapping such as {tasks: {<task_id>: {kind: ...}}}, not "x"`},
		{"tasks is a list", "dags: {d: {tasks: [t]}}\n",
			`c.yaml: line 1: dags.d.tasks: tasks is a mapping of task_id to its task, such as {<task_id>: {kind: run, defaults: {...}}}, not a list`},
		{"a task is a value", "dags: {d: {tasks: {t: run}}}\n",
			`c.yaml: line 1: dags.d.tasks.t: a task is a mapping such as {kind: run, defaults: {...}}, not "run"`},
		{"kind is a mapping", "dags: {d: {tasks: {t: {kind: {run: 1}}}}}\n",
			`c.yaml: line 1: dags.d.tasks.t.kind: must be a single value (a string), not a mapping`},
		{"conf is a value", "dags: {d: {tasks: {t: {kind: run, conf: timeout}}}}\n",
			`c.yaml: line 1: dags.d.tasks.t.conf: must be a list such as [a, b], not "timeout"`},
		{"defaults is a list", "dags: {d: {tasks: {t: {kind: run, defaults: [a]}}}}\n",
			`c.yaml: line 1: dags.d.tasks.t.defaults: must be a mapping such as {key: value}, not a list`},
		{"selftest is no bool", "selftest: maybe\ndags: {d: {tasks: {t: {kind: run}}}}\n",
			`c.yaml: line 1: selftest: must be true or false, not "maybe"`},
		{"mapped is no bool", "dags: {d: {tasks: {t: {kind: collect, inputs: {sandbox: {xcom: p, mapped: 1}}}}}}\n",
			`c.yaml: line 1: dags.d.tasks.t.inputs.sandbox.mapped: must be true or false, not "1"`},
		{"an outlet is a value", "dags: {d: {tasks: {t: {kind: run, outlets: [a, b]}}}}\n",
			"c.yaml: line 1: dags.d.tasks.t.outlets[0]: an outlet is a mapping such as {uri: s3://bucket/converted/} or {alias: <name>}, not \"a\"\n" +
				`c.yaml: line 1: dags.d.tasks.t.outlets[1]: an outlet is a mapping such as {uri: s3://bucket/converted/} or {alias: <name>}, not "b"`},
		{"backend options are a value", "backends: {local: yes}\ndags: {d: {tasks: {t: {kind: run}}}}\n",
			`c.yaml: line 1: backends.local: must be a mapping such as {key: value}, not "yes"`},
		{"a task written twice", "dags:\n  d:\n    tasks:\n      t: {kind: run}\n      t: {kind: run}\n",
			`c.yaml: line 5: dags.d.tasks: key "t" is written twice (first at line 4); keep one`},
		{"a key written twice in a task", "dags:\n  d:\n    tasks:\n      t:\n        kind: run\n        kind: run\n",
			`c.yaml: line 6: dags.d.tasks.t: key "kind" is written twice (first at line 5); keep one`},
		{"a key written twice in defaults", "dags: {d: {tasks: {t: {kind: run, defaults: {network: {block: true, block: false}}}}}}\n",
			`c.yaml: line 1: dags.d.tasks.t.defaults.network: key "block" is written twice (first at line 1); keep one`},
		{"a merge of a value", "dags: {d: {tasks: {t: {<<: run}}}}\n",
			`c.yaml: line 1: dags.d.tasks.t: a merge (<<) takes a mapping or a list of mappings, not "run"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Load(bundles.New(), []byte(c.yaml), "c.yaml")
			if err == nil || err.Error() != c.want {
				t.Fatalf("got  %v\nwant %s", err, c.want)
			}
		})
	}
}

// A merge key brings a shared mapping into a task, and what it brings is
// checked where it lands.
func TestMergeKeysAreCheckedWhereTheyLand(t *testing.T) {
	ok := "dags:\n  d:\n    tasks:\n      a: &base {kind: run, defaults: {command: [ls]}}\n      b: {<<: *base, conf: [timeout]}\n"
	if err := Load(bundles.New(), []byte(ok), "c.yaml"); err != nil {
		t.Fatalf("a merge of a task's keys: %v", err)
	}
	bad := "dags:\n  d:\n    tasks:\n      a: {kind: run}\n      b: {<<: {kind: run, defalts: {}}}\n"
	want := `c.yaml: line 5: dags.d.tasks.b: unknown key "defalts" in a task; allowed: kind, defaults, inputs, conf, outlets, map_index, mapped_downstream, execution_timeout, multiple_outputs, branch, branch_joins`
	if err := Load(bundles.New(), []byte(bad), "c.yaml"); err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
}

// A Dag written twice among many (the mapping checked with a map rather
// than pairwise) is found, and a config wrong everywhere reports a bounded
// number of lines.
func TestManyProblemsAreBounded(t *testing.T) {
	data := string(manyDags(40)) + "  dag_000003:\n    tasks: {t: {kind: run}}\n"
	want := `c.yaml: line 162: dags: key "dag_000003" is written twice (first at line 14); keep one`
	if err := Load(bundles.New(), []byte(data), "c.yaml"); err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
	var b strings.Builder
	b.WriteString("dags:\n")
	for i := range 30 {
		fmt.Fprintf(&b, "  d%d: {taks: {}}\n", i)
	}
	err := Load(bundles.New(), []byte(b.String()), "c.yaml")
	lines := strings.Split(fmt.Sprint(err), "\n")
	if len(lines) != maxShapeErrors+1 || lines[maxShapeErrors] != "c.yaml: and 10 more problems like these" {
		t.Fatalf("%d lines, last %q", len(lines), lines[len(lines)-1])
	}
}

// The keys the checker allows are exactly the keys yaml.v3 decodes into
// each struct: each allowed key decodes strictly, and the list is in field
// order with nothing else.
func TestAllowedKeysAreTheStructsYAMLKeys(t *testing.T) {
	structs := configStructs()
	for _, typ := range []reflect.Type{
		reflect.TypeFor[bundleConfig](), reflect.TypeFor[dagConfig](), reflect.TypeFor[taskConfig](),
		reflect.TypeFor[inputConfig](), reflect.TypeFor[outletConfig](),
	} {
		s := structs[typ]
		if s == nil {
			t.Fatalf("%v is not among the config's structs", typ)
		}
		allowed := strings.Split(s.allowed, ", ")
		if len(allowed) != len(s.fields) {
			t.Errorf("%v: allowed %q but %d fields", typ, s.allowed, len(s.fields))
		}
		for _, key := range allowed {
			dec := yaml.NewDecoder(strings.NewReader(key + ": null\n"))
			dec.KnownFields(true)
			if err := dec.Decode(reflect.New(typ).Interface()); err != nil {
				t.Errorf("%v: allowed key %q is not a field yaml.v3 knows: %v", typ, key, err)
			}
		}
		dec := yaml.NewDecoder(strings.NewReader("no_such_key: 1\n"))
		dec.KnownFields(true)
		if dec.Decode(reflect.New(typ).Interface()) == nil {
			t.Errorf("%v: the strict decoder accepts anything, so the check above proves nothing", typ)
		}
	}
	if got := structs[reflect.TypeFor[inputConfig]()].allowed; got != "xcom, key, param, expand, mapped, asset_event, field, all, template" {
		t.Errorf("input binding keys %q", got)
	}
}

// Every struct the config reaches says where it stands and what to write
// there, so a new one cannot produce a message without them.
func TestEveryConfigStructDescribesItself(t *testing.T) {
	structs := configStructs()
	if len(structs) < 5 {
		t.Fatalf("only %d structs found from bundleConfig", len(structs))
	}
	var names []string
	for typ, s := range structs {
		names = append(names, typ.Name())
		if s.place == "" {
			t.Errorf("%v has no configPlace", typ)
		}
		if _, ok := reflect.Zero(typ).Interface().(configShaper); !ok {
			t.Errorf("%v has no configShape", typ)
		}
	}
	slices.Sort(names)
	if !slices.Contains(names, "outletConfig") {
		t.Errorf("structs found: %v", names)
	}
}
