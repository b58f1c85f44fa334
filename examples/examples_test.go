// Package examples_test checks that each example's stub Dag and its Go side
// agree: the same dag_id, the same Go task ids both ways, the same
// connection ids.
package examples_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/airflow-sandbox/airflow-go-worker/catalogue"
)

// stubDag is what a dag.py declares.
type stubDag struct {
	dagID     string
	stubTasks []string          // @task.stub(queue="golang") functions
	connIDs   map[string]string // keyword (e.g. modal_conn_id) -> id, from code
	text      string
}

var (
	dagIDRe  = regexp.MustCompile(`dag_id="([^"]+)"`)
	stubRe   = regexp.MustCompile(`@task\.stub\((.*)\)\n(?:@.*\n)*def (\w+)\(`)
	queueRe  = regexp.MustCompile(`queue="([^"]+)"`)
	connKwRe = regexp.MustCompile(`(\w*conn_id)="([^"]+)"`)
	goConnRe = regexp.MustCompile(`"(\w*conn_id)":\s*"([^"]+)"`)
)

func readStubDag(t *testing.T, path string) stubDag {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	d := stubDag{connIDs: map[string]string{}, text: text}
	ids := dagIDRe.FindAllStringSubmatch(text, -1)
	if len(ids) != 1 {
		t.Fatalf("%s: want exactly one dag_id=\"...\", found %d", path, len(ids))
	}
	d.dagID = ids[0][1]
	for _, m := range stubRe.FindAllStringSubmatch(text, -1) {
		q := queueRe.FindStringSubmatch(m[1])
		if q == nil || q[1] != "golang" {
			t.Errorf("%s: stub task %s is not on the golang queue, so the coordinator would never run it", path, m[2])
		}
		d.stubTasks = append(d.stubTasks, m[2])
	}
	for _, m := range connKwRe.FindAllStringSubmatch(text, -1) {
		d.connIDs[m[1]] = m[2]
	}
	sort.Strings(d.stubTasks)
	return d
}

// goSide is what the Go half registers: tasks per Dag and connection ids
// by the input name they are given under.
type goSide struct {
	tasks   map[string][]string
	connIDs map[string][]string // id -> keys it is given under (conn_id, export_conn_id, ...)
	backend map[string]string   // task -> backend default
	conn    map[string]string   // task -> conn_id default
	kind    map[string]string   // task -> kind
	subset  bool                // the stub Dag may leave some of the Go tasks out
}

type bundleYAML struct {
	// Sweep adds the maintenance Dag (catalogue.SweepDagID, task sweep).
	Sweep *struct {
		Backends []struct {
			Backend string `yaml:"backend"`
			ConnID  string `yaml:"conn_id"`
		} `yaml:"backends"`
		StorageConnID string `yaml:"storage_conn_id"`
	} `yaml:"sweep"`
	Dags map[string]struct {
		Tasks map[string]struct {
			Kind     string         `yaml:"kind"`
			Defaults map[string]any `yaml:"defaults"`
		} `yaml:"tasks"`
	} `yaml:"dags"`
}

func readBundleConfig(t *testing.T, path string) goSide {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg bundleYAML
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	g := goSide{tasks: map[string][]string{}, connIDs: map[string][]string{}, backend: map[string]string{}, conn: map[string]string{}, kind: map[string]string{}}
	for dagID, dag := range cfg.Dags {
		for taskID, task := range dag.Tasks {
			g.tasks[dagID] = append(g.tasks[dagID], taskID)
			for k, v := range task.Defaults {
				if s, ok := v.(string); ok && strings.HasSuffix(k, "conn_id") {
					g.connIDs[s] = append(g.connIDs[s], k)
				}
			}
			g.backend[taskID], _ = task.Defaults["backend"].(string)
			g.conn[taskID], _ = task.Defaults["conn_id"].(string)
			g.kind[taskID] = task.Kind
		}
		sort.Strings(g.tasks[dagID])
	}
	if sw := cfg.Sweep; sw != nil {
		g.tasks[catalogue.SweepDagID] = []string{catalogue.SweepTaskID}
		for _, b := range sw.Backends {
			if b.ConnID != "" {
				g.connIDs[b.ConnID] = append(g.connIDs[b.ConnID], "conn_id")
			}
		}
		if sw.StorageConnID != "" {
			g.connIDs[sw.StorageConnID] = append(g.connIDs[sw.StorageConnID], "storage_conn_id")
		}
	}
	return g
}

// readGoBundle builds a Go example and asks it for its manifest, exactly
// as Airflow does.
func readGoBundle(t *testing.T, dir string) goSide {
	t.Helper()
	g := goSide{tasks: map[string][]string{}, connIDs: map[string][]string{}}
	for dagID, tasks := range manifestDags(t, dir) {
		if dagID == selftestDag {
			continue // the deployment check every bundle may ship, not the example's Dag
		}
		g.tasks[dagID] = tasks
	}
	src, err := os.ReadFile(filepath.Join(dir, "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range goConnRe.FindAllStringSubmatch(string(src), -1) {
		g.connIDs[m[2]] = append(g.connIDs[m[2]], m[1])
	}
	return g
}

const selftestDag = "airflow_go_worker_selftest"

// readSelftest is the Go side of examples/selftest: the standard binary
// packed without a config, which carries only the self-test Dag. Its stub
// Dag may leave tasks out (fail always fails).
func readSelftest(t *testing.T) goSide {
	t.Helper()
	dags := manifestDags(t, "../cmd/airflow-go-worker")
	if len(dags) != 1 || len(dags[selftestDag]) == 0 {
		t.Fatalf("the standard binary without a config lists Dags %v; want only %s", dags, selftestDag)
	}
	return goSide{tasks: dags, connIDs: map[string][]string{}, subset: true}
}

// manifestDags builds the Go program in dir and lists its Dags' tasks
// (sorted) from its --airflow-metadata, as Airflow reads them.
func manifestDags(t *testing.T, dir string) map[string][]string {
	t.Helper()
	bin := buildGoExample(t, dir)
	out, err := exec.Command(bin, "--airflow-metadata", "--format", "json").Output()
	if err != nil {
		t.Fatalf("%s --airflow-metadata: %v", dir, err)
	}
	var m struct {
		Dags map[string]struct {
			Tasks []string `json:"tasks"`
		} `json:"dags"`
	}
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("%s: manifest is not JSON: %v\n%s", dir, err, out)
	}
	dags := map[string][]string{}
	for dagID, d := range m.Dags {
		dags[dagID] = append([]string(nil), d.Tasks...)
		sort.Strings(dags[dagID])
	}
	return dags
}

var goBuilds struct {
	sync.Mutex
	dir  string            // one temporary directory for every build, removed by TestMain
	bins map[string]string // example dir -> its binary
}

// buildGoExample builds a Go example once per test binary.
func buildGoExample(t *testing.T, dir string) string {
	t.Helper()
	goBuilds.Lock()
	defer goBuilds.Unlock()
	if bin, ok := goBuilds.bins[dir]; ok {
		return bin
	}
	if goBuilds.dir == "" {
		d, err := os.MkdirTemp("", "examples-test-")
		if err != nil {
			t.Fatal(err)
		}
		goBuilds.dir, goBuilds.bins = d, map[string]string{}
	}
	bin := filepath.Join(goBuilds.dir, filepath.Base(dir))
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", dir, err, out)
	}
	goBuilds.bins[dir] = bin
	return bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if goBuilds.dir != "" {
		os.RemoveAll(goBuilds.dir)
	}
	os.Exit(code)
}

func TestExamplesAreConsistent(t *testing.T) {
	dirs, err := filepath.Glob("*/dag.py")
	if err != nil || len(dirs) != 9 {
		t.Fatalf("want nine examples with a dag.py, found %v (%v)", dirs, err)
	}
	for _, dagFile := range dirs {
		dir := filepath.Dir(dagFile)
		t.Run(dir, func(t *testing.T) {
			stub := readStubDag(t, dagFile)
			var g goSide
			if dir == "selftest" {
				g = readSelftest(t)
			} else if _, err := os.Stat(filepath.Join(dir, "bundle.yaml")); err == nil {
				g = readBundleConfig(t, filepath.Join(dir, "bundle.yaml"))
			} else {
				g = readGoBundle(t, dir)
			}
			if len(g.tasks) != 1 {
				t.Fatalf("the Go side declares Dags %v; want exactly %s", keys(g.tasks), stub.dagID)
			}
			goTasks, ok := g.tasks[stub.dagID]
			if !ok {
				t.Fatalf("the Go side has no Dag %q (it has %v)", stub.dagID, keys(g.tasks))
			}
			if g.subset {
				for _, task := range stub.stubTasks {
					if !slices.Contains(goTasks, task) {
						t.Errorf("stub task %s is not among the Go tasks %v", task, goTasks)
					}
				}
			} else if strings.Join(goTasks, ",") != strings.Join(stub.stubTasks, ",") {
				t.Errorf("stub tasks %v but Go tasks %v", stub.stubTasks, goTasks)
			}
			// Every connection the Go side uses is named in the Dag file, so
			// whoever deploys it knows to create it.
			for id := range g.connIDs {
				if !strings.Contains(stub.text, "``"+id+"``") && !strings.Contains(stub.text, `"`+id+`"`) {
					t.Errorf("the Go side uses connection %q, which %s never mentions", id, dagFile)
				}
			}
			// Every connection the Python side names is one the Go side uses.
			for kw, id := range stub.connIDs {
				if kw == "llm_conn_id" {
					continue // the agent's model, not a sandbox resource
				}
				if _, ok := g.connIDs[id]; !ok {
					t.Errorf("%s=%q in %s is not a connection the Go side uses (it uses %v)", kw, id, dagFile, keys(g.connIDs))
				}
			}
			// The agent attaches with its own Modal connection: it must be the
			// one the Go provision task created the sandbox with, or the
			// sandbox id is not visible to it.
			if py, ok := stub.connIDs["modal_conn_id"]; ok {
				for task, backend := range g.backend {
					if backend != "modal" {
						continue
					}
					goConn := g.conn[task]
					if goConn == "" {
						goConn = "modal_default"
					}
					if goConn != py {
						t.Errorf("task %s uses Modal connection %q but the agent attaches with %q", task, goConn, py)
					}
				}
			}
		})
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
