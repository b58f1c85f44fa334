package catalogue

import (
	"fmt"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// yaml.v3 checks every mapping's keys for duplicates pairwise before
// decoding it, which is quadratic: a bundle config with 100k Dags took
// minutes to load, on every task start. The two mappings that grow with
// the config (dags, and a Dag's tasks) decode themselves instead, checking
// duplicates with a map; checkKnownKeys keeps them as strict as the rest of
// the file.

// dagsByID is the dags: mapping, dag_id -> Dag.
type dagsByID map[string]dagConfig

// UnmarshalYAML decodes the mapping in linear time.
func (m *dagsByID) UnmarshalYAML(n *yaml.Node) error {
	return decodeByID(n, (*map[string]dagConfig)(m))
}

// tasksByID is a Dag's tasks: mapping, task_id -> task.
type tasksByID map[string]taskConfig

// UnmarshalYAML decodes the mapping in linear time.
func (m *tasksByID) UnmarshalYAML(n *yaml.Node) error {
	return decodeByID(n, (*map[string]taskConfig)(m))
}

func decodeByID[V any](n *yaml.Node, out *map[string]V) error {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: cannot unmarshal %s into a mapping of ids", n.Line, n.ShortTag())}}
	}
	*out = make(map[string]V, len(n.Content)/2)
	seen := make(map[string]int, len(n.Content)/2)
	var errs []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if line, dup := seen[k.Value]; dup {
			errs = append(errs, fmt.Sprintf("line %d: mapping key %q already defined at line %d", k.Line, k.Value, line))
			continue
		}
		seen[k.Value] = k.Line
		var v V
		if err := n.Content[i+1].Decode(&v); err != nil {
			if te, ok := err.(*yaml.TypeError); ok {
				errs = append(errs, te.Errors...)
				continue
			}
			return err
		}
		(*out)[k.Value] = v
	}
	if len(errs) > 0 {
		return &yaml.TypeError{Errors: errs}
	}
	return nil
}

// checkKnownKeys walks the document against the config's Go types and
// reports every mapping key that names no field, in yaml.v3's own words
// ("field x not found in type main.taskConfig"), which describeYAMLError
// turns into the config's terms. Each (node, type) pair is visited once, so
// aliases cost nothing extra.
func checkKnownKeys(doc *yaml.Node, t reflect.Type) error {
	k := keyChecker{seen: map[keyVisit]bool{}}
	if len(doc.Content) > 0 {
		k.walk(doc.Content[0], t)
	}
	if len(k.errs) > 0 {
		return &yaml.TypeError{Errors: k.errs}
	}
	return nil
}

type keyVisit struct {
	n *yaml.Node
	t reflect.Type
}

type keyChecker struct {
	seen map[keyVisit]bool
	errs []string
}

func (k *keyChecker) walk(n *yaml.Node, t reflect.Type) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.SequenceNode && t.Kind() == reflect.Slice {
		for _, item := range n.Content {
			k.walk(item, t.Elem())
		}
		return
	}
	if n.Kind != yaml.MappingNode || k.seen[keyVisit{n, t}] {
		return
	}
	k.seen[keyVisit{n, t}] = true
	switch t.Kind() {
	case reflect.Map:
		for i := 1; i < len(n.Content); i += 2 {
			k.walk(n.Content[i], t.Elem())
		}
	case reflect.Struct:
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i]
			ft, ok := fields[key.Value]
			if !ok {
				k.errs = append(k.errs, fmt.Sprintf("line %d: field %s not found in type %s", key.Line, key.Value, t))
				continue
			}
			k.walk(n.Content[i+1], ft)
		}
	}
}

// yamlFields maps a struct's YAML key names to the fields' types.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}
