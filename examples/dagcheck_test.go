package examples_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// dagFacts is what dagFactsScript reads from a dag.py with Python's own
// parser: the file must be valid Python for it to answer at all.
type dagFacts struct {
	Imports []string `json:"imports"` // modules imported from
	Stubs   map[string]struct {
		Queue       string `json:"queue"`
		TriggerRule string `json:"trigger_rule"` // "" when not set
	} `json:"stubs"`
	Toolsets []struct {
		Backend  string `json:"backend"`   // the callee of the first argument
		AttachTo string `json:"attach_to"` // "" when not given
	} `json:"toolsets"`
	// Args maps each stub called with arguments to them: argument name ->
	// the stub task whose result it passes ("" when it is not one).
	// Positional lists arguments passed by position, which nothing binds.
	Args       map[string]map[string]string `json:"args"`
	Positional []string                     `json:"positional"`
	// Teardowns maps each stub made a teardown (stub(...).as_teardown(
	// setups=...)) to the stub tasks its setups name; Setups lists the
	// stubs marked setup (by those setups, or by .as_setup()).
	Teardowns map[string][]string `json:"teardowns"`
	Setups    []string            `json:"setups"`
}

// dagFactsScript parses a Dag file (never imports it, so Airflow need not
// be installed) and prints dagFacts as JSON.
const dagFactsScript = `
import ast, json, sys

tree = ast.parse(open(sys.argv[1]).read(), sys.argv[1])

def name(node):
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return name(node.value) + "." + node.attr
    if isinstance(node, ast.Call):
        return name(node.func)
    return ""

def stub_of(node):
    # the function of the call whose result node is: f(...) or a variable holding it
    if isinstance(node, ast.Call):
        return name(node.func)
    if isinstance(node, ast.Name):
        return results.get(node.id, "")
    return ""

def rule(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Attribute) and name(node.value).endswith("TriggerRule"):
        return node.attr.lower()
    return "<not a trigger rule>"

facts = {"imports": [], "stubs": {}, "toolsets": [], "args": {}, "positional": [], "teardowns": {}, "setups": []}
results = {}  # variable -> the function whose call result it holds
for node in ast.walk(tree):
    if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
        for target in node.targets:
            if isinstance(target, ast.Name):
                results[target.id] = name(node.value.func)
calls = []
for node in ast.walk(tree):
    if isinstance(node, ast.Call) and (node.args or node.keywords):
        calls.append(node)
    if isinstance(node, ast.ImportFrom):
        facts["imports"].append(node.module or "")
    elif isinstance(node, ast.Import):
        facts["imports"].extend(a.name for a in node.names)
    elif isinstance(node, ast.FunctionDef):
        for dec in node.decorator_list:
            if isinstance(dec, ast.Call) and name(dec.func) == "task.stub":
                kw = {k.arg: k.value for k in dec.keywords}
                q = kw.get("queue")
                facts["stubs"][node.name] = {
                    "queue": q.value if isinstance(q, ast.Constant) else "",
                    "trigger_rule": rule(kw["trigger_rule"]) if "trigger_rule" in kw else "",
                }
    elif isinstance(node, ast.Call) and name(node.func) == "SandboxToolset":
        kw = {k.arg: k.value for k in node.keywords}
        a = kw.get("attach_to")
        facts["toolsets"].append({
            "backend": name(node.args[0]) if node.args else "",
            "attach_to": a.value if isinstance(a, ast.Constant) else "",
        })
for node in ast.walk(tree):
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        continue
    target = stub_of(node.func.value)
    if node.func.attr == "as_setup":
        facts["setups"].append(target)
    elif node.func.attr == "as_teardown":
        kw = {k.arg: k.value for k in node.keywords}
        s = kw.get("setups")
        setups = [stub_of(e) for e in s.elts] if isinstance(s, (ast.List, ast.Tuple)) else [stub_of(s)] if s else []
        facts["teardowns"][target] = setups
        facts["setups"].extend(setups)
for call in calls:
    callee = name(call.func)
    if callee not in facts["stubs"]:
        continue
    if call.args:
        facts["positional"].append(callee)
    args = facts["args"].setdefault(callee, {})
    for k in call.keywords:
        v = k.value
        if isinstance(v, ast.Call):
            up = name(v.func)
        elif isinstance(v, ast.Name):
            up = results.get(v.id, "")
        else:
            up = ""
        args[k.arg] = up if up in facts["stubs"] else ""
print(json.dumps(facts))
`

func readDagFacts(t *testing.T, path string) dagFacts {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is needed to check that the example Dags are valid Python (apt-get install -y python3): %v", err)
	}
	out, err := exec.Command(python, "-c", dagFactsScript, path).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("%s is not valid Python: %v\n%s", path, err, stderr)
	}
	var f dagFacts
	if err := json.Unmarshal(out, &f); err != nil {
		t.Fatalf("reading the facts of %s: %v\n%s", path, err, out)
	}
	return f
}

// The stub Dags are Airflow 3 Python: they parse, they import from the
// Task SDK rather than from airflow.utils / airflow.decorators / airflow.models
// (Airflow 2 paths that Airflow 3 deprecates or removed), and every stub
// runs on the golang queue.
func TestStubDagsAreValidAirflow3Python(t *testing.T) {
	files, err := filepath.Glob("*/dag.py")
	if err != nil || len(files) != 9 {
		t.Fatalf("want nine dag.py files, found %v (%v)", files, err)
	}
	for _, file := range files {
		t.Run(filepath.Dir(file), func(t *testing.T) {
			f := readDagFacts(t, file)
			for _, m := range f.Imports {
				for _, old := range []string{"airflow.utils", "airflow.decorators", "airflow.models", "airflow.operators"} {
					if m == old || strings.HasPrefix(m, old+".") {
						t.Errorf("imports from %s, an Airflow 2 path; import it from airflow.sdk", m)
					}
				}
			}
			if len(f.Stubs) == 0 {
				t.Fatal("no @task.stub tasks")
			}
			for name, s := range f.Stubs {
				if s.Queue != "golang" {
					t.Errorf("stub %s is on queue %q, not golang", name, s.Queue)
				}
			}
		})
	}
}

// The handoff Dag wires what the interop needs: the agent attaches to a
// Modal sandbox through the provision task's return_value, and the sandbox
// is created on Modal (TestSandboxIsDestroyedByATeardown checks that it
// goes even when the agent fails).
func TestAgentHandoffDagMatchesItsBundleConfig(t *testing.T) {
	f := readDagFacts(t, "agent_handoff/dag.py")
	cfg := readKinds(t, "agent_handoff/bundle.yaml")

	if len(f.Toolsets) != 1 {
		t.Fatalf("want one SandboxToolset, found %d", len(f.Toolsets))
	}
	ts := f.Toolsets[0]
	if ts.Backend != "ModalSandboxBackend" {
		t.Errorf("the toolset's backend is %q; only ModalSandboxBackend can attach", ts.Backend)
	}
	var provisions []string
	for task, k := range cfg {
		switch k.kind {
		case "provision":
			provisions = append(provisions, task)
			if k.backend != "modal" {
				t.Errorf("%s provisions on %q; a Python agent attaches only to Modal sandboxes", task, k.backend)
			}
		}
	}
	if len(provisions) != 1 {
		t.Fatalf("want one provision task, found %v", provisions)
	}
	want := "{{ ti.xcom_pull(task_ids='" + provisions[0] + "') }}"
	if ts.AttachTo != want {
		t.Errorf("attach_to is %q, want %q (the provision task's return_value, a bare sandbox id)", ts.AttachTo, want)
	}
}

// In every shipped Dag that provisions a sandbox and later destroys it,
// provision is the setup task and the destroying task (collect, destroy)
// its teardown, with no trigger rule of its own: Airflow runs a teardown
// once the tasks before it are done, whatever they ended as (if its setup
// succeeded), and leaves it out of the run's state. Under a plain
// trigger_rule=all_done the destroying task was the Dag's only leaf, and a
// run whose middle task failed ended success.
func TestSandboxIsDestroyedByATeardown(t *testing.T) {
	files, err := filepath.Glob("*/bundle.yaml")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, cfgFile := range files {
		dir := filepath.Dir(cfgFile)
		kinds := readKinds(t, cfgFile)
		var provisions, destroyers []string
		for task, k := range kinds {
			switch k.kind {
			case "provision":
				provisions = append(provisions, task)
			case "collect", "destroy":
				destroyers = append(destroyers, task)
			}
		}
		if len(provisions) == 0 || len(destroyers) == 0 {
			continue
		}
		t.Run(dir, func(t *testing.T) {
			f := readDagFacts(t, filepath.Join(dir, "dag.py"))
			for _, task := range destroyers {
				checked++
				setups, ok := f.Teardowns[task]
				switch {
				case !ok:
					t.Errorf("%s (kind %s) is not a teardown; call %s(...).as_teardown(setups=<the %s result>) so that it runs even when a task before it failed and the run still fails", task, kinds[task].kind, task, provisions[0])
				case !slices.ContainsFunc(setups, func(s string) bool { return slices.Contains(provisions, s) }):
					t.Errorf("%s.as_teardown(setups=%v) names no provision task %v; name it, so provision is the setup", task, setups, provisions)
				}
				if rule := f.Stubs[task].TriggerRule; rule != "" {
					t.Errorf("stub %s sets trigger_rule %q; as_teardown replaces it with all_done_setup_success, so remove it", task, rule)
				}
			}
		})
	}
	if checked == 0 {
		t.Fatal("no example both provisions and destroys a sandbox; the check checked nothing")
	}
}

// Airflow 3.3 drops the arguments of a stub call, so every upstream result
// a stub Dag passes must also be bound on the Go side to the same upstream
// XCom (bundle config inputs: {xcom: ...}, or bundles.WithXCom): then the
// Dag runs unchanged on 3.3, and on 3.4, where the arguments arrive.
func TestStubArgumentsAreBoundForAirflow33(t *testing.T) {
	files, err := filepath.Glob("*/dag.py")
	if err != nil || len(files) != 9 {
		t.Fatalf("want nine dag.py files, found %v (%v)", files, err)
	}
	checked := 0
	for _, file := range files {
		dir := filepath.Dir(file)
		t.Run(dir, func(t *testing.T) {
			f := readDagFacts(t, file)
			if len(f.Positional) > 0 {
				t.Errorf("stubs %v get positional arguments; pass them by name, as the Go inputs bind by name", f.Positional)
			}
			if len(f.Args) == 0 {
				return // no stub call passes anything (the self-test's Go side has no source here)
			}
			bound := goXComBindings(t, dir)
			for task, args := range f.Args {
				for arg, up := range args {
					checked++
					if up == "" {
						t.Errorf("%s(%s=...) passes something other than a stub task's result; Airflow 3.3 drops it and nothing on the Go side can read it", task, arg)
						continue
					}
					if got := bound[task][arg]; got != up {
						t.Errorf("%s(%s=%s()) is dropped by Airflow 3.3; bind it on the Go side (inputs: {%s: {xcom: %s}} or bundles.WithXCom(%q, %q)), found %q", task, arg, up, arg, up, arg, up, got)
					}
				}
			}
		})
	}
	if checked == 0 {
		t.Fatal("no stub call passes an argument; the check checked nothing")
	}
}

var (
	registerRe = regexp.MustCompile(`\.Register\(\w+, "(\w+)"`)
	withXComRe = regexp.MustCompile(`bundles\.WithXCom\("(\w+)", "(\w+)"\)`)
)

// goXComBindings reads task -> input -> upstream task of the return_value
// XCom bindings, from bundle.yaml or from the Go example's main.go.
func goXComBindings(t *testing.T, dir string) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	if _, err := os.Stat(filepath.Join(dir, "bundle.yaml")); err == nil {
		var cfg struct {
			Dags map[string]struct {
				Tasks map[string]struct {
					Inputs map[string]struct {
						XCom string `yaml:"xcom"`
						Key  string `yaml:"key"`
					} `yaml:"inputs"`
				} `yaml:"tasks"`
			} `yaml:"dags"`
		}
		readYAML(t, filepath.Join(dir, "bundle.yaml"), &cfg)
		for _, dag := range cfg.Dags {
			for task, tc := range dag.Tasks {
				for in, src := range tc.Inputs {
					if src.XCom != "" && (src.Key == "" || src.Key == "return_value") {
						if out[task] == nil {
							out[task] = map[string]string{}
						}
						out[task][in] = src.XCom
					}
				}
			}
		}
		return out
	}
	src, err := os.ReadFile(filepath.Join(dir, "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	// Each Register call runs up to the next one.
	locs := registerRe.FindAllStringSubmatchIndex(string(src), -1)
	for i, loc := range locs {
		end := len(src)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		task := string(src[loc[2]:loc[3]])
		for _, m := range withXComRe.FindAllStringSubmatch(string(src[loc[0]:end]), -1) {
			if out[task] == nil {
				out[task] = map[string]string{}
			}
			out[task][m[1]] = m[2]
		}
	}
	return out
}

type taskKind struct{ kind, backend string }

// readKinds maps each task of a bundle config to its kind and backend.
func readKinds(t *testing.T, path string) map[string]taskKind {
	t.Helper()
	var cfg bundleYAML
	readYAML(t, path, &cfg)
	out := map[string]taskKind{}
	for _, dag := range cfg.Dags {
		for id, task := range dag.Tasks {
			b, _ := task.Defaults["backend"].(string)
			out[id] = taskKind{kind: task.Kind, backend: b}
		}
	}
	return out
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
