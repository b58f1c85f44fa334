package catalogue

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// The bundle config is checked in two passes: checkShape walks the YAML
// node tree against the config's Go types and reports, in the config's own
// terms, every key that names no field, every key written twice and every
// value of the wrong kind (with its line, its place such as
// dags.d.tasks.t.inputs.sandbox, and what to write there); only then is the
// tree decoded, which can no longer fail on the file's shape.
//
// yaml.v3 checks every mapping's keys for duplicates pairwise while it
// decodes, which is quadratic: a bundle config with 100k Dags took minutes
// to load, on every task start. The two mappings that grow with the config
// (dags, and a Dag's tasks) therefore decode themselves, entry by entry;
// checkShape has found their duplicates with a map by then.

// dagsByID is the dags: mapping, dag_id -> Dag.
type dagsByID map[string]dagConfig

// UnmarshalYAML decodes the mapping in linear time.
func (m *dagsByID) UnmarshalYAML(n *yaml.Node) error {
	return decodeByID(n, (*map[string]dagConfig)(m))
}

func (dagsByID) configShape() string {
	return "dags is a mapping of dag_id to its Dag, such as {<dag_id>: {tasks: {<task_id>: {kind: ...}}}}"
}

// tasksByID is a Dag's tasks: mapping, task_id -> task.
type tasksByID map[string]taskConfig

// UnmarshalYAML decodes the mapping in linear time.
func (m *tasksByID) UnmarshalYAML(n *yaml.Node) error {
	return decodeByID(n, (*map[string]taskConfig)(m))
}

func (tasksByID) configShape() string {
	return "tasks is a mapping of task_id to its task, such as {<task_id>: {kind: run, defaults: {...}}}"
}

// decodeByID decodes a mapping checkShape has checked: its keys are
// unique and its values have their types' shapes.
func decodeByID[V any](n *yaml.Node, out *map[string]V) error {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: a mapping of ids was expected", n.Line)
	}
	*out = make(map[string]V, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		var v V
		if err := n.Content[i+1].Decode(&v); err != nil {
			return err
		}
		(*out)[n.Content[i].Value] = v
	}
	return nil
}

// Each struct of the config says where it stands (for "unknown key "x" in
// a task") and what to write there; a map type of its own may say what to
// write (configShape). A test checks every struct the config reaches has
// both.
type (
	configPlacer interface{ configPlace() string }
	configShaper interface{ configShape() string }
)

func (bundleConfig) configPlace() string { return "at the top level" }
func (bundleConfig) configShape() string {
	return "the file holds dags: {<dag_id>: {tasks: {<task_id>: {kind: ..., defaults: {...}}}}}"
}
func (dagConfig) configPlace() string { return "in a Dag" }
func (dagConfig) configShape() string {
	return "a Dag is a mapping such as {tasks: {<task_id>: {kind: ...}}}"
}
func (taskConfig) configPlace() string { return "in a task" }
func (taskConfig) configShape() string {
	return "a task is a mapping such as {kind: run, defaults: {...}}"
}
func (inputConfig) configPlace() string { return "in an input binding" }
func (inputConfig) configShape() string {
	return "an entry of inputs is a mapping such as {xcom: <upstream task_id>} or {param: <name>}"
}
func (outletConfig) configPlace() string { return "in an outlet" }
func (outletConfig) configShape() string {
	return "an outlet is a mapping such as {uri: s3://bucket/converted/} or {alias: <name>}"
}

// configStruct is what the checker knows of one struct of the config,
// read from its yaml tags.
type configStruct struct {
	fields  map[string]reflect.Type // yaml key -> field type
	allowed string                  // the keys, in field order: "kind, defaults, ..."
	place   string                  // "in a task"
}

// configStructs reads every struct the bundle config reaches, once, when
// the first config is checked (a task start that finds no config pays
// nothing; none of it runs at init).
var configStructs = sync.OnceValue(func() map[reflect.Type]*configStruct {
	out := map[reflect.Type]*configStruct{}
	collectStructs(reflect.TypeFor[bundleConfig](), out)
	return out
})

func collectStructs(t reflect.Type, out map[reflect.Type]*configStruct) {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map:
		collectStructs(t.Elem(), out)
	case reflect.Struct:
		if out[t] != nil {
			return
		}
		s := &configStruct{fields: map[string]reflect.Type{}}
		if p, ok := reflect.Zero(t).Interface().(configPlacer); ok {
			s.place = p.configPlace()
		}
		out[t] = s
		var keys []string
		for i := range t.NumField() {
			f := t.Field(i)
			name := yamlKey(f)
			if name == "" {
				continue
			}
			s.fields[name] = f.Type
			keys = append(keys, name)
			collectStructs(f.Type, out)
		}
		s.allowed = strings.Join(keys, ", ")
	}
}

// yamlKey is the key yaml.v3 decodes a struct field from, or "" for a
// field it skips.
func yamlKey(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" || !f.IsExported() {
		return ""
	}
	if name == "" {
		return strings.ToLower(f.Name)
	}
	return name
}

// maxShapeErrors bounds how many problems one check reports: a config
// generated wrong would otherwise print one line per Dag.
const maxShapeErrors = 20

// checkShape walks the document against the config's Go type t and
// returns every problem it finds, one line each, prefixed by source.
func checkShape(doc *yaml.Node, t reflect.Type, source string) error {
	c := shapeChecker{structs: configStructs(), seen: map[shapeVisit]bool{}}
	if len(doc.Content) > 0 {
		c.walk(doc.Content[0], t)
	}
	if len(c.errs) == 0 {
		return nil
	}
	for i := range c.errs {
		c.errs[i] = source + ": " + c.errs[i]
	}
	if c.more > 0 {
		c.errs = append(c.errs, fmt.Sprintf("%s: and %d more problems like these", source, c.more))
	}
	return errors.New(strings.Join(c.errs, "\n"))
}

type shapeVisit struct {
	n *yaml.Node
	t reflect.Type
}

// shapeChecker walks one document. path holds the keys (or list indexes)
// leading to the node being walked, and is spelt out only for an error.
type shapeChecker struct {
	structs map[reflect.Type]*configStruct
	seen    map[shapeVisit]bool // anchored nodes walked, as each type
	path    []pathStep
	errs    []string
	more    int
}

type pathStep struct {
	key   string
	index int // for a list item: key is "" and this is its index
}

func (c *shapeChecker) fail(n *yaml.Node, format string, args ...any) {
	if len(c.errs) == maxShapeErrors {
		c.more++
		return
	}
	msg := fmt.Sprintf(format, args...)
	if p := c.place(); p != "" {
		msg = p + ": " + msg
	}
	c.errs = append(c.errs, fmt.Sprintf("line %d: %s", n.Line, msg))
}

// place spells out the path: dags.d.tasks.t.outlets[0].
func (c *shapeChecker) place() string {
	var b strings.Builder
	for _, s := range c.path {
		if s.key == "" {
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s.key)
	}
	return b.String()
}

func (c *shapeChecker) walk(n *yaml.Node, t reflect.Type) {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return // decodes as the zero value, which the checks after this one judge
	}
	if n.Anchor != "" {
		// Only an anchored node can be reached twice (through aliases).
		if c.seen[shapeVisit{n, t}] {
			return
		}
		c.seen[shapeVisit{n, t}] = true
	}
	switch t.Kind() {
	case reflect.Interface:
		// Any YAML value: the task's own checks judge defaults and sweep,
		// once the keys written twice inside are found here.
		c.walkAny(n, t)
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			c.fail(n, "%s, not %s", shapeOf(t), describeNode(n))
			return
		}
		c.walkStruct(n, t)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			c.fail(n, "%s, not %s", shapeOf(t), describeNode(n))
			return
		}
		c.walkMap(n, t)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			c.fail(n, "%s, not %s", shapeOf(t), describeNode(n))
			return
		}
		for i, item := range n.Content {
			c.path = append(c.path, pathStep{index: i})
			c.walk(item, t.Elem())
			c.path = c.path[:len(c.path)-1]
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			c.fail(n, "%s, not %s", shapeOf(t), describeNode(n))
		}
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
			c.fail(n, "%s, not %s", shapeOf(t), describeNode(n))
		}
	default:
		if n.Kind != yaml.ScalarNode || n.Decode(reflect.New(t).Interface()) != nil {
			c.fail(n, "%s, not %s", shapeOf(t), describeNode(n))
		}
	}
}

// walkStruct checks a mapping's keys against the struct's fields and walks
// each value as its field's type.
func (c *shapeChecker) walkStruct(n *yaml.Node, t reflect.Type) {
	s := c.structs[t]
	c.checkDuplicates(n)
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, value := n.Content[i], n.Content[i+1]
		if key.ShortTag() == "!!merge" {
			c.walkMerge(value, t)
			continue
		}
		ft, ok := s.fields[key.Value]
		if !ok || key.Kind != yaml.ScalarNode {
			c.fail(key, "unknown key %q %s; allowed: %s", key.Value, s.place, s.allowed)
			continue
		}
		c.path = append(c.path, pathStep{key: key.Value})
		c.walk(value, ft)
		c.path = c.path[:len(c.path)-1]
	}
}

// walkMap checks a mapping's keys are plain values and walks each value as
// the map's element type.
func (c *shapeChecker) walkMap(n *yaml.Node, t reflect.Type) {
	c.checkDuplicates(n)
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, value := n.Content[i], n.Content[i+1]
		if key.ShortTag() == "!!merge" {
			c.walkMerge(value, t)
			continue
		}
		if key.Kind != yaml.ScalarNode {
			c.fail(key, "a key must be a name, not %s", describeNode(key))
			continue
		}
		c.path = append(c.path, pathStep{key: key.Value})
		c.walk(value, t.Elem())
		c.path = c.path[:len(c.path)-1]
	}
}

// walkAny finds the keys written twice anywhere inside a value of any
// type (t is the interface type).
func (c *shapeChecker) walkAny(n *yaml.Node, t reflect.Type) {
	switch n.Kind {
	case yaml.MappingNode:
		c.checkDuplicates(n)
		for i := 0; i+1 < len(n.Content); i += 2 {
			c.path = append(c.path, pathStep{key: n.Content[i].Value})
			c.walk(n.Content[i+1], t)
			c.path = c.path[:len(c.path)-1]
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			c.path = append(c.path, pathStep{index: i})
			c.walk(item, t)
			c.path = c.path[:len(c.path)-1]
		}
	}
}

// walkMerge walks what a merge key (<<: *base, or a list of them) brings
// into a mapping of type t.
func (c *shapeChecker) walkMerge(v *yaml.Node, t reflect.Type) {
	for i := 0; v.Kind == yaml.AliasNode && v.Alias != nil && i < 100; i++ {
		v = v.Alias
	}
	if v.Kind == yaml.SequenceNode {
		for _, item := range v.Content {
			c.walkMerge(item, t)
		}
		return
	}
	if v.Kind != yaml.MappingNode {
		c.fail(v, "a merge (<<) takes a mapping or a list of mappings, not %s", describeNode(v))
		return
	}
	c.walk(v, t)
}

// checkDuplicates reports every key a mapping repeats (merge keys aside):
// pairwise for a few keys, with a map for many (dags: may hold 100k).
func (c *shapeChecker) checkDuplicates(n *yaml.Node) {
	const pairwise = 16
	if len(n.Content) <= 2*pairwise {
		for i := 2; i+1 < len(n.Content); i += 2 {
			for j := 0; j < i; j += 2 {
				if sameKey(n.Content[j], n.Content[i]) {
					c.duplicate(n.Content[i], n.Content[j])
					break
				}
			}
		}
		return
	}
	first := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
			continue
		}
		if prev, dup := first[k.Value]; dup {
			c.duplicate(k, prev)
			continue
		}
		first[k.Value] = k
	}
}

func sameKey(a, b *yaml.Node) bool {
	return a.Kind == yaml.ScalarNode && b.Kind == yaml.ScalarNode && a.Value == b.Value && a.ShortTag() != "!!merge"
}

func (c *shapeChecker) duplicate(k, first *yaml.Node) {
	c.fail(k, "key %q is written twice (first at line %d); keep one", k.Value, first.Line)
}

// shapeOf says what to write where a value of type t stands.
func shapeOf(t reflect.Type) string {
	if s, ok := reflect.Zero(t).Interface().(configShaper); ok {
		return s.configShape()
	}
	switch t.Kind() {
	case reflect.Map:
		return "must be a mapping such as {key: value}"
	case reflect.Slice:
		return "must be a list such as [a, b]"
	case reflect.Bool:
		return "must be true or false"
	case reflect.String:
		return "must be a single value (a string)"
	default:
		return "must be a " + t.Kind().String()
	}
}

// describeNode names what was written instead: a scalar by its value.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return strconv.Quote(n.Value)
	}
}
