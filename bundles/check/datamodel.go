package check

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/taskinfo"
)

// The kinds of data-model finding: what a stub Dag declares about assets
// and mapping that the Go task, which Airflow tells none of it, does not
// reproduce.
const (
	OutletMismatch     Kind = "outlet_mismatch"     // the bundle reports other outlets than the stub declares
	MappingMismatch    Kind = "mapping_mismatch"    // the bundle maps the task otherwise than the stub
	MappingUnsupported Kind = "mapping_unsupported" // a form of mapping a Go task cannot follow on Airflow 3.3
)

// assetFacts is one outlet of a stub task, as Airflow parsed it (its uri
// normalised: Asset("s3://b/x/") has uri s3://b/x).
type assetFacts struct {
	Type string  `json:"type"`
	Name *string `json:"name"`
	URI  *string `json:"uri"`
}

// expandFacts is how a stub task is mapped: kind dict (.expand) or list
// (.expand_kwargs), each argument an upstream's XCom, a literal, or a
// form the bundle cannot read.
type expandFacts struct {
	Kind string               `json:"kind"`
	Args map[string]argSource `json:"args"`
}

type argSource struct {
	XCom        string `json:"xcom"`
	Key         string `json:"key"`
	Literal     any    `json:"literal"`
	Unsupported string `json:"unsupported"`
	// Template says the literal holds Jinja, which Airflow would render.
	Template bool `json:"template"`
}

// describeDataModel adds a task's outlets and mapping to its description.
func describeDataModel(t taskinfo.Task, td *TaskDescription) {
	td.DataModel = true
	for _, a := range t.Outlets {
		name, uri := a.Name, a.URI
		if name == "" {
			name = uri
		}
		if uri == "" {
			uri = name
		}
		td.Outlets = append(td.Outlets, OutletDescription{Type: "Asset", Name: name, URI: uri})
	}
	for _, a := range t.Aliases {
		td.Outlets = append(td.Outlets, OutletDescription{Type: "AssetAlias", Name: a})
	}
	if len(t.Expansions) > 0 {
		td.Expansions = t.Expansions
	}
	td.FeedsMapping = t.FeedsMapping
}

func (a assetFacts) String() string {
	s := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	switch a.Type {
	case "Asset":
		return fmt.Sprintf("{name: %q, uri: %q}", s(a.Name), s(a.URI))
	case "AssetAlias":
		return fmt.Sprintf("{alias: %q}", s(a.Name))
	}
	return fmt.Sprintf("%s(%s%s)", a.Type, s(a.Name), s(a.URI))
}

func (o OutletDescription) String() string {
	if o.Type == "AssetAlias" {
		return fmt.Sprintf("{alias: %q}", o.Name)
	}
	return fmt.Sprintf("{name: %q, uri: %q}", o.Name, o.URI)
}

// goTask is one task on a Go queue being checked: where its findings go,
// and the bundle config path (dags.<dag>.tasks.<task>) its fixes name.
type goTask struct {
	c     *checker
	d     dagFacts
	t     taskFacts
	where string
}

func (c *checker) goTask(d dagFacts, t taskFacts) goTask {
	return goTask{c: c, d: d, t: t, where: fmt.Sprintf("dags.%s.tasks.%s", d.DagID, t.TaskID)}
}

func (g goTask) add(kind Kind, problem, fix string) {
	g.c.add(Finding{Kind: kind, File: g.d.FileLoc, DagID: g.d.DagID, TaskID: g.t.TaskID, Problem: problem, Fix: fix})
}

// checkDataModel compares a Go task's outlets and mapping with its stub's.
func (c *checker) checkDataModel(d dagFacts, t taskFacts, td TaskDescription, bundle string) {
	if !td.DataModel {
		return
	}
	g := c.goTask(d, t)
	g.checkOutlets(td, bundle)
	g.checkFeedsMapping(td)
	g.checkMapping(td)
}

// checkOutlets: the Execution API registers events for what the task
// reports, matched to the assets Airflow parsed by (name, uri).
func (g goTask) checkOutlets(td TaskDescription, bundle string) {
	var stub, refs []string
	for _, a := range g.t.Outlets {
		if a.Type == "AssetNameRef" || a.Type == "AssetUriRef" {
			refs = append(refs, a.String())
			continue
		}
		stub = append(stub, a.String())
	}
	var ours []string
	for _, o := range td.Outlets {
		ours = append(ours, o.String())
	}
	sort.Strings(stub)
	sort.Strings(ours)
	if len(refs) > 0 {
		g.add(OutletMismatch, fmt.Sprintf("the stub's outlets include %s: a Go task reports the assets it declares, and can declare an asset or an alias, not a reference", strings.Join(refs, ", ")),
			"declare the asset itself in the stub (outlets=[Asset(name=..., uri=...)]) and the same in the bundle config's outlets:")
	}
	if slices.Equal(stub, ours) {
		return
	}
	problem := fmt.Sprintf("the stub declares outlets [%s], Airflow's names and uris as it parsed them, but %s reports [%s] when the task succeeds: Airflow registers asset events only for what the task reports and only for assets a Dag declares, so Dags scheduled on the stub's assets do not run",
		strings.Join(stub, ", "), bundle, strings.Join(ours, ", "))
	fix := fmt.Sprintf("set outlets: [%s] under %s in the bundle config (Go: bundles.WithOutlets / WithOutletAliases) and pack it again", strings.Join(stub, ", "), g.where)
	if len(stub) == 0 {
		fix = fmt.Sprintf("declare the same outlets in the stub (@task.stub(outlets=[Asset(...)])), or remove outlets: from %s", g.where)
	}
	g.add(OutletMismatch, problem, fix)
}

// checkFeedsMapping: a mapped task expanding over this one needs its
// list's length.
func (g goTask) checkFeedsMapping(td TaskDescription) {
	if len(g.t.MappedDependants) > 0 && !td.FeedsMapping {
		g.add(MappingMismatch, fmt.Sprintf("%s expand over this task's return value, but the bundle pushes it without its length (mapped_length), so Airflow cannot expand them and they fail", strings.Join(g.t.MappedDependants, ", ")),
			fmt.Sprintf("bind the mapped task's input with {xcom: %s, expand: true} (when it is a Go task of this bundle), or set mapped_downstream: true under %s (Go: bundles.WithMappedDownstream())", g.t.TaskID, g.where))
	}
}

// checkMapping compares the task's own mapping: the forms a Go task can
// follow, then the one expanded argument, then inputs expanded in the
// bundle only.
func (g goTask) checkMapping(td TaskDescription) {
	t := g.t
	if t.Expand == nil {
		for in := range td.Expansions {
			g.add(MappingMismatch, fmt.Sprintf("input %s takes a mapped instance's element (expand), but the stub is not mapped, so the task fails when it starts", in),
				fmt.Sprintf("map the stub (%s.expand(%s=...)), or bind %s without expand", t.TaskID, in, in))
		}
		return
	}
	if t.Expand.Kind != "dict" {
		g.add(MappingUnsupported, "the stub is mapped with .expand_kwargs(): Airflow does not render a mapped argument for an executable, and the bundle cannot know which keyword arguments each instance got",
			fmt.Sprintf("map over one list with .expand(<input>=<list or upstream task>) and bind the input with {expand: ...} under %s", g.where))
		return
	}
	names := sortedKeys(t.Expand.Args)
	if len(names) > 1 {
		g.add(MappingUnsupported, fmt.Sprintf("the stub expands over %d arguments (%s): Airflow maps it over their cross product, which the bundle does not reproduce", len(names), strings.Join(names, ", ")),
			"expand over one list (of records, when each instance needs several values, e.g. an upstream returning [{url, format}, ...]) and take the other values from partial() defaults in the bundle config")
		return
	}
	for _, name := range names {
		g.checkExpandArg(name, t.Expand.Args[name], td)
	}
	for in := range td.Expansions {
		if _, ok := t.Expand.Args[in]; !ok && len(names) == 1 {
			g.add(MappingMismatch, fmt.Sprintf("input %s takes a mapped instance's element, but the stub expands %s", in, names[0]),
				fmt.Sprintf("expand the same input in the stub and the bundle config (%s)", g.where))
		}
	}
}

// checkExpandArg compares the list the stub expands name over with the
// one the bundle takes its element from.
func (g goTask) checkExpandArg(name string, src argSource, td TaskDescription) {
	exp, bound := td.Expansions[name]
	var upstreamMapped bool
	for _, other := range g.d.Tasks {
		upstreamMapped = upstreamMapped || other.TaskID == src.XCom && other.Expand != nil
	}
	switch {
	case src.Unsupported != "":
		g.add(MappingUnsupported, fmt.Sprintf("the stub expands %s over a %s, which the bundle cannot read (Airflow does not render expand inputs for executables)", name, src.Unsupported),
			"expand over an upstream task's return value or a literal list, and do any mapping in the upstream task")
	case src.XCom != "" && src.Key != protocol.ReturnValueKey:
		g.add(MappingUnsupported, fmt.Sprintf("the stub expands %s over XCom %s of %s; the bundle reads an upstream's return_value", name, src.Key, src.XCom),
			fmt.Sprintf("return the list from %s (its return_value)", src.XCom))
	case upstreamMapped:
		g.add(MappingUnsupported, fmt.Sprintf("the stub expands %s over the results of %s, which is mapped itself: the bundle reads an unmapped upstream's list", name, src.XCom),
			fmt.Sprintf("collect %s's results in an unmapped task ({xcom: %s, mapped: true}) that returns the list, and expand over that", src.XCom, src.XCom))
	case !bound:
		binding := fmt.Sprintf("{xcom: %s, expand: true}", src.XCom)
		if src.XCom == "" {
			binding = "{expand: " + jsonText(src.Literal) + "}"
		}
		g.add(MappingMismatch, fmt.Sprintf("the stub expands %s, but the bundle binds no input to a mapped instance's element: Airflow does not hand an executable its element, so every instance would run with the same inputs", name),
			fmt.Sprintf("add inputs: {%s: %s} under %s", name, binding, g.where))
	case src.XCom != "" && exp.XComTask != src.XCom:
		g.add(MappingMismatch, fmt.Sprintf("the stub expands %s over the return value of %s, the bundle over %s", name, src.XCom, describeExpansion(exp)),
			fmt.Sprintf("bind %s with {xcom: %s, expand: true} under %s", name, src.XCom, g.where))
	case src.XCom == "" && (!exp.Literal || jsonText(exp.Items) != jsonText(src.Literal)):
		g.add(MappingMismatch, fmt.Sprintf("the stub expands %s over %s, the bundle over %s: instance i would get another element than Airflow mapped", name, jsonText(src.Literal), describeExpansion(exp)),
			fmt.Sprintf("bind %s with {expand: %s} under %s (the same list as the stub)", name, jsonText(src.Literal), g.where))
	}
}

func describeExpansion(e taskinfo.Expansion) string {
	if e.Literal {
		return jsonText(e.Items)
	}
	return "the return value of " + e.XComTask
}

func jsonText(v any) string {
	if v == nil {
		v = []any{}
	}
	data, _ := json.Marshal(v)
	return string(data)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
