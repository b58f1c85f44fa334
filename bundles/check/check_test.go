package check

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/footer"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/schema"
	"github.com/airflow-sandbox/airflow-go-worker/testing/pyenv"
)

// builds caches one build of each program for the whole test binary.
var builds struct {
	sync.Mutex
	dir  string
	bins map[string]string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
	os.Exit(code)
}

// build builds the Go program in pkg (relative to the repository) with tags.
func build(t *testing.T, pkg, tags string) string {
	t.Helper()
	builds.Lock()
	defer builds.Unlock()
	key := pkg + " " + tags
	if bin, ok := builds.bins[key]; ok {
		return bin
	}
	if builds.dir == "" {
		d, err := os.MkdirTemp("", "check-test-")
		if err != nil {
			t.Fatal(err)
		}
		builds.dir, builds.bins = d, map[string]string{}
	}
	root, err := pyenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(builds.dir, strings.NewReplacer("/", "_", ".", "_", " ", "_").Replace(key))
	cmd := exec.Command("go", "build", "-tags", tags, "-o", bin, "./"+pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, out)
	}
	builds.bins[key] = bin
	return bin
}

// pack packs bin with config into out.
func pack(t *testing.T, bin, config, out string, flags ...string) {
	t.Helper()
	args := append([]string{"pack", "--executable", bin, "--output", out}, flags...)
	if config != "" {
		args = append(args, "--config", config)
	}
	if b, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("pack %s: %v\n%s", config, err, b)
	}
}

// airflowEnv is an environment for the Python side: a fresh AIRFLOW_HOME
// and the routing given.
func airflowEnv(t *testing.T, coordinators, queues string) []string {
	env := []string{"AIRFLOW_HOME=" + t.TempDir()}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AIRFLOW_HOME=") && !strings.HasPrefix(kv, "AIRFLOW__") {
			env = append(env, kv)
		}
	}
	if coordinators != "" {
		env = append(env, "AIRFLOW__SDK__COORDINATORS="+coordinators)
	}
	if queues != "" {
		env = append(env, "AIRFLOW__SDK__QUEUE_TO_COORDINATOR="+queues)
	}
	return env
}

func goCoordinator(roots ...string) string {
	b, _ := json.Marshal(map[string]any{"go": map[string]any{
		"classpath": "airflow.sdk.coordinators.executable.ExecutableCoordinator",
		"kwargs":    map[string]any{"executables_root": roots},
	}})
	return string(b)
}

type found struct{ kind, dag, task string }

func kinds(r Report) []found {
	var out []found
	for _, f := range r.Findings {
		out = append(out, found{string(f.Kind), f.DagID, f.TaskID})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		return a.kind+"\x00"+a.dag+"\x00"+a.task < b.kind+"\x00"+b.dag+"\x00"+b.task
	})
	return out
}

func findingOf(r Report, kind Kind, dag, task string) Finding {
	for _, f := range r.Findings {
		if f.Kind == kind && f.DagID == dag && f.TaskID == task {
			return f
		}
	}
	return Finding{}
}

// Each mistake, made once in Dags Airflow itself parses, is found once,
// named by file, Dag and task, with a fix; a bundle the coordinator would
// skip does not count as serving its Dag.
func TestCheckFindsEachMistake(t *testing.T) {
	python := pyenv.Python(t)
	bin := build(t, "cmd/airflow-go-worker", "")
	roots := t.TempDir()
	pack(t, bin, "testdata/one.yaml", filepath.Join(roots, "one.bundle"))
	if err := os.Mkdir(filepath.Join(roots, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	pack(t, bin, "testdata/two.yaml", filepath.Join(roots, "sub", "two.bundle"))
	// Two bundles list orphan, and the coordinator would skip both.
	pack(t, bin, "testdata/orphan.yaml", filepath.Join(roots, "orphan.bundle"))
	if err := os.Chmod(filepath.Join(roots, "orphan.bundle"), 0o644); err != nil {
		t.Fatal(err)
	}
	pack(t, bin, "testdata/orphan.yaml", filepath.Join(roots, "orphan34.bundle"), "--airflow", "3.4")

	dags, err := filepath.Abs("testdata/mistakes")
	if err != nil {
		t.Fatal(err)
	}
	coords := goCoordinator(roots)
	coords = strings.TrimSuffix(coords, "}") + `,"broken":{"classpath":"no.such.Coordinator"}}`
	env := airflowEnv(t, coords, `{"golang": "go", "nowhere": "broken"}`)
	// Through the command line, as a Dag author runs it: exit status 1 and
	// the report as JSON.
	cmd := exec.Command(bin, "check", "--dags", dags, "--dags", "testdata/broken", "--python", python, "--format", "json")
	cmd.Env = env
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("check exited with %v, want status 1 for findings\n%s", err, out)
	}
	var r Report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("the JSON report: %v\n%s", err, out)
	}
	for _, f := range r.Findings {
		t.Logf("%s", f)
	}
	want := []found{
		{"dag_in_two_bundles", "twice", ""},
		{"dag_not_in_a_bundle", "orphan", ""},
		{"import_error", "", ""},
		{"not_a_stub", "wired", "python_on_go"},
		{"queue_not_routed", "wired", "lost"},
		{"routing_error", "wired", "misrouted"},
		{"task_not_registered", "wired", "extra"},
		{"xcom_not_upstream", "wired", "b"},
		{"xcom_unknown_task", "wired", "b"},
	}
	if got := kinds(r); !slices.Equal(got, want) {
		t.Fatalf("findings\n got %v\nwant %v", got, want)
	}
	mistakes := filepath.Join(dags, "mistakes.py")
	for _, f := range r.Findings {
		if f.Fix == "" || f.Problem == "" {
			t.Errorf("%s: no problem or no fix", f)
		}
		if f.Kind != ImportError && f.File != mistakes {
			t.Errorf("%s: file %q, want %s", f.Kind, f.File, mistakes)
		}
	}
	if f := findingOf(r, ImportError, "", ""); !strings.HasSuffix(f.File, "broken.py") || !strings.Contains(f.Problem, "broken on purpose") {
		t.Errorf("import error %+v", f)
	}
	// The coordinator's pick between the two bundles, checked against the
	// coordinator itself in TestWalkOrderIsTheCoordinators.
	if f := findingOf(r, DagInTwoBundles, "twice", ""); !strings.Contains(f.Problem, filepath.Join(roots, "one.bundle")) || !strings.Contains(f.Problem, filepath.Join(roots, "sub", "two.bundle")) || !strings.Contains(f.Problem, "here ") {
		t.Errorf("two bundles: %s", f.Problem)
	}
	if f := findingOf(r, DagNotInAnyBundle, "orphan", ""); !strings.Contains(f.Problem, "orphan.bundle (not executable") || !strings.Contains(f.Problem, `orphan34.bundle (supervisor schema "2026-10-30"`) {
		t.Errorf("the skipped bundles are not named: %s", f.Problem)
	}
	if f := findingOf(r, XComNotUpstream, "wired", "b"); !strings.Contains(f.Problem, "input sandbox") || !strings.Contains(f.Fix, "a >> b") {
		t.Errorf("not upstream: %s", f)
	}
	if f := findingOf(r, XComUnknownTask, "wired", "b"); !strings.Contains(f.Problem, "task ghost") {
		t.Errorf("unknown task: %s", f)
	}
	if f := findingOf(r, TaskNotRegistered, "wired", "extra"); !strings.Contains(f.Problem, filepath.Join(roots, "one.bundle")) || !strings.Contains(f.Fix, "dags.wired.tasks.extra") {
		t.Errorf("not registered: %s", f)
	}
	if r.AirflowVersion == "" || r.Dags != 3 {
		t.Errorf("parsed %d Dags with Airflow %q; want the 3 Dags of mistakes.py", r.Dags, r.AirflowVersion)
	}
}

// The shipped examples, packed as the docs say and routed as make
// airflow-e2e routes them, pass. This is the check a Dag repository's CI
// runs: --queue instead of Airflow's configuration.
func TestCheckPassesTheShippedExamples(t *testing.T) {
	python := pyenv.Python(t)
	std := build(t, "cmd/airflow-go-worker", "all_extras")
	goTasks := build(t, "examples/go_tasks", "")
	roots := t.TempDir()
	configs, err := filepath.Glob("../../examples/*/bundle.yaml")
	if err != nil || len(configs) == 0 {
		t.Fatalf("no example bundle configs: %v", err)
	}
	for _, config := range configs {
		pack(t, std, config, filepath.Join(roots, filepath.Base(filepath.Dir(config))+".bundle"))
	}
	pack(t, goTasks, "", filepath.Join(roots, "go_tasks.bundle")) // it carries the self-test Dag too
	dagFiles, err := filepath.Glob("../../examples/*/dag.py")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(context.Background(), Options{Dags: []string{"../../examples"}, Roots: []string{roots}, Queues: []string{"golang"}, Python: python, Env: airflowEnv(t, "", "")})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range r.Findings {
		t.Errorf("%s", f)
	}
	if r.Dags != len(dagFiles) || r.GoTasks < r.Dags || len(r.Bundles) != len(configs)+1 || len(r.Notes) != 0 {
		t.Errorf("checked %d Dags, %d Go tasks, bundles %v, notes %v; want the %d example Dags, each with Go tasks, %d bundles, no notes", r.Dags, r.GoTasks, r.Bundles, r.Notes, len(dagFiles), len(configs)+1)
	}
}

// walk finds bundles in the order Airflow 3.3's coordinator does, so the
// bundle check names as picked is the one the coordinator runs.
func TestWalkOrderIsTheCoordinators(t *testing.T) {
	python := pyenv.Python(t)
	bin := build(t, "cmd/airflow-go-worker", "")
	dir, file := t.TempDir(), filepath.Join(t.TempDir(), "alone.bundle")
	for _, name := range []string{"b1", "a2", "sub/z3", "sub/c4", "m5", "sub/deeper/k6", "y7"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		pack(t, bin, "testdata/two.yaml", filepath.Join(dir, name))
	}
	pack(t, bin, "testdata/two.yaml", file)
	roots := []string{file, dir}
	var ours []string
	for _, f := range walk(roots) {
		ours = append(ours, f.path)
	}
	script := `
import json, pathlib, sys
from airflow.sdk.coordinators.executable.coordinator import _Bundle, _find_executables
roots = [pathlib.Path(p) for p in sys.argv[1:]]
print(json.dumps({"walk": [str(p) for p in _find_executables(roots)], "pick": str(_Bundle.find(roots, "twice").path)}))
`
	cmd := exec.Command(python, append([]string{"-c", script}, roots...)...)
	cmd.Env = airflowEnv(t, "", "")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("asking the coordinator: %v", err)
	}
	var theirs struct {
		Walk []string `json:"walk"`
		Pick string   `json:"pick"`
	}
	if err := json.Unmarshal(out[strings.LastIndexByte(strings.TrimSpace(string(out)), '\n')+1:], &theirs); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !slices.Equal(ours, theirs.Walk) {
		t.Errorf("walk order\n ours %v\ncoordinator's %v", ours, theirs.Walk)
	}
	if len(ours) != 8 || ours[0] != theirs.Pick {
		t.Errorf("we would pick %v, the coordinator picks %s", ours, theirs.Pick)
	}
}

// Without Airflow's python, check says how to give it.
func TestCheckNeedsAirflowsPython(t *testing.T) {
	_, err := Run(context.Background(), Options{Dags: []string{"testdata/mistakes"}, Python: "/nonexistent/python"})
	if err == nil || !strings.Contains(err.Error(), "--python") || !strings.Contains(err.Error(), PythonEnv) {
		t.Errorf("no python: %v", err)
	}
	plain, lookErr := exec.LookPath("python3")
	if lookErr != nil {
		t.Fatalf("python3 (Debian's, without Airflow) is needed for this test: %v", lookErr)
	}
	if exec.Command(plain, "-c", "import airflow").Run() == nil {
		t.Fatalf("%s can import airflow; this test needs a python that cannot", plain)
	}
	_, err = Run(context.Background(), Options{Dags: []string{"testdata/mistakes"}, Python: plain})
	if err == nil || !strings.Contains(err.Error(), "cannot import Airflow") || !strings.Contains(err.Error(), "--python") {
		t.Errorf("a python without Airflow: %v", err)
	}
}

// The Python entry point (python/airflow_go_worker/check.py) runs the check
// from a Python test with the test's own interpreter, and fails naming
// every finding.
func TestPythonEntryPoint(t *testing.T) {
	python := pyenv.Python(t)
	bin := build(t, "cmd/airflow-go-worker", "")
	roots := t.TempDir()
	pack(t, bin, "testdata/one.yaml", filepath.Join(roots, "one.bundle"))
	root, err := pyenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	script := `
import json, sys
from airflow_go_worker.check import assert_wired
try:
    assert_wired(dags=[sys.argv[1]], executables_roots=[sys.argv[2]], queues=["golang", "gopher"])
except AssertionError as e:
    print(json.dumps({"failed": str(e)}))
else:
    print(json.dumps({"failed": ""}))
`
	cmd := exec.Command(python, "-c", script, "testdata/mistakes", roots)
	cmd.Env = append(airflowEnv(t, "", ""), "PYTHONPATH="+filepath.Join(root, "python"), "AIRFLOW_GO_WORKER_BIN="+bin)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	var res struct{ Failed string }
	if err := json.Unmarshal(out[strings.LastIndexByte(strings.TrimSpace(string(out)), '\n')+1:], &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, want := range []string{"wiring finding(s)", "Dag wired, task extra", "Dag wired, task b: input sandbox", "Dag orphan", "Dag wired, task python_on_go", "fix: "} {
		if !strings.Contains(res.Failed, want) {
			t.Errorf("assert_wired's message lacks %q:\n%s", want, res.Failed)
		}
	}
}

// What a stub declares about assets and mapping, which Airflow never tells
// the Go task, is checked against the bundle: each mistake once, named by
// file, Dag and task, with the fix; what matches raises nothing.
func TestCheckComparesOutletsAndMapping(t *testing.T) {
	python := pyenv.Python(t)
	bin := build(t, "cmd/airflow-go-worker", "")
	roots := t.TempDir()
	pack(t, bin, "testdata/datamodel.yaml", filepath.Join(roots, "datamodel.bundle"))
	dags, err := filepath.Abs("testdata/datamodel")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(context.Background(), Options{Dags: []string{dags}, Roots: []string{roots}, Queues: []string{"golang"}, Python: python, Env: airflowEnv(t, "", "")})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range r.Findings {
		t.Logf("%s", f)
	}
	want := []found{
		{"mapping_mismatch", "dm_mapping", "feeder"},
		{"mapping_mismatch", "dm_mapping", "literal"},
		{"mapping_mismatch", "dm_mapping", "unbound"},
		{"mapping_mismatch", "dm_mapping", "unmapped"},
		{"mapping_unsupported", "dm_mapping", "cross"},
		{"mapping_unsupported", "dm_mapping", "kwargs"},
		{"outlet_mismatch", "dm_assets", "export_normalised"},
		{"outlet_mismatch", "dm_assets", "export_undeclared"},
	}
	if got := kinds(r); !slices.Equal(got, want) {
		t.Fatalf("findings\n got %v\nwant %v", got, want)
	}
	file := filepath.Join(dags, "datamodel.py")
	for _, f := range r.Findings {
		if f.File != file || f.Fix == "" {
			t.Errorf("%s: want file %s and a fix", f, file)
		}
	}
	// The fix names the asset exactly as Airflow parsed it.
	if f := findingOf(r, OutletMismatch, "dm_assets", "export_normalised"); !strings.Contains(f.Fix, `outlets: [{name: "s3://b/converted/", uri: "s3://b/converted"}]`) || !strings.Contains(f.Fix, "dags.dm_assets.tasks.export_normalised") {
		t.Errorf("normalised outlet: %s", f)
	}
	if f := findingOf(r, OutletMismatch, "dm_assets", "export_undeclared"); !strings.Contains(f.Fix, "declare the same outlets in the stub") {
		t.Errorf("undeclared outlet: %s", f)
	}
	if f := findingOf(r, MappingMismatch, "dm_mapping", "unbound"); !strings.Contains(f.Fix, "inputs: {sandbox: {xcom: lister, expand: true}}") {
		t.Errorf("unbound: %s", f)
	}
	if f := findingOf(r, MappingMismatch, "dm_mapping", "literal"); !strings.Contains(f.Fix, `{expand: ["a","b"]}`) {
		t.Errorf("literal: %s", f)
	}
	if f := findingOf(r, MappingMismatch, "dm_mapping", "feeder"); !strings.Contains(f.Problem, "python_mapped") || !strings.Contains(f.Fix, "mapped_downstream: true") {
		t.Errorf("feeder: %s", f)
	}
}

// A bundle packed by hand (not by pack, which refuses a bad config) with a
// config its own load-time checks refuse is a finding: every task it
// serves would fail at start-up. The same Dag served by the packed good
// config has none, so the finding is the config's.
func TestCheckFindsABundleThatCannotLoadItsConfig(t *testing.T) {
	python := pyenv.Python(t)
	bin := build(t, "cmd/airflow-go-worker", "")
	dags, err := filepath.Abs("testdata/loads")
	if err != nil {
		t.Fatal(err)
	}
	config := func(lifetime string) string {
		return "dags:\n  loads:\n    tasks:\n      make:\n        kind: provision\n        defaults: {backend: local, lifetime: " + lifetime + "}\n"
	}
	check := func(roots string) Report {
		t.Helper()
		r, err := Run(context.Background(), Options{Dags: []string{dags}, Roots: []string{roots}, Queues: []string{"golang"}, Python: python, Env: airflowEnv(t, "", "")})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range r.Findings {
			t.Logf("%s", f)
		}
		return r
	}

	good := t.TempDir()
	goodConfig := filepath.Join(t.TempDir(), "bundle.yaml")
	if err := os.WriteFile(goodConfig, []byte(config("1h")), 0o644); err != nil {
		t.Fatal(err)
	}
	pack(t, bin, goodConfig, filepath.Join(good, "loads.bundle"))
	if r := check(good); len(r.Findings) != 0 || r.Dags != 1 {
		t.Fatalf("the packed good config: %d Dags, findings %v; want 1 Dag and none", r.Dags, kinds(r))
	}

	bad := t.TempDir()
	m := footer.Manifest{MetadataVersion: footer.MetadataVersion, Source: "bundle.yaml",
		SDK:  footer.SDK{Language: "go", Version: "hand-made", SupervisorSchemaVersion: schema.Default},
		Dags: map[string]footer.Dag{"loads": {Tasks: []string{"make"}}}}
	if _, err := footer.Pack(filepath.Join(bad, "loads.bundle"), bin, []byte(config("48h")), m); err != nil {
		t.Fatal(err)
	}
	r := check(bad)
	if got := kinds(r); !slices.Equal(got, []found{{"bundle_does_not_load", "", ""}}) {
		t.Fatalf("findings %v, want one bundle_does_not_load", got)
	}
	f := r.Findings[0]
	if f.File != filepath.Join(bad, "loads.bundle") || !strings.Contains(f.Problem, "lifetime") || !strings.Contains(f.Fix, "pack --config") {
		t.Fatalf("the finding must name the bundle, the key and the fix: %s", f)
	}
}
