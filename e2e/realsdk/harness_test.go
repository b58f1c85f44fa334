// Package realsdk_test runs our packed bundles under Airflow's own task SDK
// (apache-airflow-task-sdk 1.3.2, Airflow 3.3.2, from the pinned venv):
// the real ExecutableCoordinator finds the bundle in executables_root,
// checks its footer and schema version, forks it, and the real supervisor
// decodes its frames and handles its requests. Only the Execution API
// server is a stand-in (python/realsdk/run_coordinator.py), which records
// every call; the tests assert on those calls.
//
// Airflow 3.4 (schema 2026-10-30) is not released, so its path can only be
// run against our own supervisor (bundles/supervisor); see schema34_test.go.
package realsdk_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"github.com/airflow-sandbox/airflow-go-worker/testing/makebuild"
	"github.com/airflow-sandbox/airflow-go-worker/testing/pyenv"
)

// Binaries built once for the package.
var (
	workerBin string // cmd/airflow-go-worker
	bundleA   string // testbundle, variant a
	bundleB   string // testbundle, variant b
	binDir    string
)

func TestMain(m *testing.M) {
	var err error
	binDir, err = os.MkdirTemp("", "realsdk-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	workerBin = filepath.Join(binDir, "airflow-go-worker")
	bundleA = filepath.Join(binDir, "testbundle-a")
	bundleB = filepath.Join(binDir, "testbundle-b")
	// The standard binary with every backend and store (EXTRAS=all), as
	// the examples' configs need.
	for out, b := range map[string]makebuild.Build{
		workerBin: {Pkg: "../../cmd/airflow-go-worker", Tags: []string{"all_extras"}},
		bundleA:   {Pkg: "./testbundle", Flags: []string{"-ldflags", "-X main.variant=a"}},
		bundleB:   {Pkg: "./testbundle", Flags: []string{"-ldflags", "-X main.variant=b"}},
	} {
		if err := b.To(out); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(binDir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

// pack packs exe into dir/name with our pack command and returns the path.
func pack(t testing.TB, dir, name, exe string, flags ...string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	args := append([]string{"pack", "--executable", exe, "--output", out}, flags...)
	if b, err := exec.Command(workerBin, args...).CombinedOutput(); err != nil {
		t.Fatalf("pack %v: %v\n%s", flags, err, b)
	}
	return out
}

// tcase is one task instance for the harness; see run_coordinator.py.
type tcase struct {
	Name           string            `json:"name"`
	Roots          []string          `json:"executables_root"`
	DagID          string            `json:"dag_id"`
	TaskID         string            `json:"task_id"`
	RunID          string            `json:"run_id,omitempty"`
	MaxTries       int               `json:"max_tries"`
	ShouldRetry    bool              `json:"should_retry"`
	Conf           map[string]any    `json:"conf,omitempty"`
	Connections    map[string]any    `json:"connections,omitempty"`
	Variables      map[string]string `json:"variables,omitempty"`
	XComs          map[string]any    `json:"xcoms,omitempty"`
	DagRuns        map[string]string `json:"dag_runs,omitempty"`
	AssetEvents    []map[string]any  `json:"asset_events,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	SigtermOnEvent string            `json:"sigterm_on_event,omitempty"`
	// ResumeOf names an earlier case that deferred: this one runs the same
	// task instance again once that case's trigger fired.
	ResumeOf string `json:"resume_of,omitempty"`
	// Timeout is the case's limit in seconds; runCases sets it to what
	// is left of the test binary's time (none for a benchmark).
	Timeout int `json:"timeout,omitempty"`
}

type apiCall struct {
	Method     string            `json:"method"`
	Path       string            `json:"path"`
	Body       any               `json:"body"`
	Params     map[string]string `json:"params"`
	Unexpected bool              `json:"unexpected"`
}

// result is what the harness recorded for one case.
type result struct {
	Name             string           `json:"name"`
	TIID             string           `json:"ti_id"`
	ExitCode         *int             `json:"exit_code"`
	FinalState       string           `json:"final_state"`
	ErrorType        string           `json:"error_type"`
	Error            string           `json:"error"`
	Traceback        string           `json:"traceback"`
	SigtermSent      bool             `json:"sigterm_sent"`
	APICalls         []apiCall        `json:"api_calls"`
	XComs            map[string]any   `json:"xcoms"`
	Requests         []map[string]any `json:"requests"`
	Replies          []map[string]any `json:"replies"`
	Logs             []map[string]any `json:"logs"`
	SchemaVersion    string           `json:"schema_version"`
	SchemaViolations []string         `json:"schema_violations"`
	// StateUpdate is the last state change the Execution API accepted
	// (PATCH .../state, validated as Airflow's route validates it).
	StateUpdate map[string]any `json:"state_update"`
	// ResumedWith is the next_method and next_kwargs a resumed case's
	// TIRunContext carried.
	ResumedWith map[string]any `json:"resumed_with"`
	// TriggerTimeoutSeconds is the accepted deferral's trigger_timeout.
	TriggerTimeoutSeconds *float64 `json:"trigger_timeout_seconds"`
	// Seconds is how long the coordinator's execute_task took: fork to
	// final state.
	Seconds float64 `json:"seconds"`
	// IdleWaits counts the supervisor's turns that began with every
	// socket at EOF and the process not yet seen to exit: each sleeps
	// min_heartbeat_interval (5 s) before it looks again.
	IdleWaits int `json:"idle_waits"`
}

// runCases runs the cases, in order, in one Python process (importing the
// task SDK costs seconds) and returns the results by case name.
func runCases(t testing.TB, cases []tcase) map[string]*result {
	t.Helper()
	py := pyenv.Python(t)
	root, err := pyenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "cases.json"), filepath.Join(dir, "results.json")
	// A case may take until near the test binary's deadline: a loaded
	// host can miss any fixed limit. (A benchmark has none: no alarm.)
	if end := deadline.Of(t); !end.IsZero() {
		for i := range cases {
			if cases[i].Timeout == 0 {
				cases[i].Timeout = max(1, int(time.Until(end).Seconds()))
			}
		}
	}
	data, _ := json.Marshal(cases)
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, filepath.Join(root, "python", "realsdk", "run_coordinator.py"), in, out)
	// Airflow reads its config from AIRFLOW_HOME; keep it out of the
	// developer's own ~/airflow.
	cmd.Env = append(os.Environ(), "AIRFLOW_HOME="+filepath.Join(dir, "airflow"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the task SDK harness failed: %v\n%s", err, b)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var list []*result
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatalf("harness results: %v", err)
	}
	byName := map[string]*result{}
	for _, r := range list {
		byName[r.Name] = r
	}
	if len(byName) != len(cases) {
		t.Fatalf("want %d results, got %d", len(cases), len(byName))
	}
	return byName
}

// ranClean checks what every task our runtime ran must satisfy under the
// real supervisor: it exited 0, sent only what schema 2026-06-16 defines,
// every request decoded, and nothing asked the API for anything unexpected.
func (r *result) ranClean(t *testing.T) {
	t.Helper()
	r.ranCleanExiting(t, 0)
}

// ranCleanExiting is ranClean for a process that exits with code.
func (r *result) ranCleanExiting(t *testing.T, code int) {
	t.Helper()
	if r.ErrorType != "" {
		t.Fatalf("%s: the coordinator raised %s: %s\n%s", r.Name, r.ErrorType, r.Error, r.Traceback)
	}
	if r.ExitCode == nil || *r.ExitCode != code {
		got := "none"
		if r.ExitCode != nil {
			got = fmt.Sprint(*r.ExitCode)
		}
		t.Errorf("%s: exit code %s, want %d (a non-zero exit overrides any reported state)", r.Name, got, code)
	}
	if r.SchemaVersion != "2026-06-16" {
		t.Errorf("%s: the installed task SDK speaks schema %s; these tests are for 1.3.x (2026-06-16)", r.Name, r.SchemaVersion)
	}
	for _, v := range r.SchemaViolations {
		t.Errorf("%s: %s", r.Name, v)
	}
	for _, c := range r.APICalls {
		if c.Unexpected {
			t.Errorf("%s: unexpected Execution API call %s %s", r.Name, c.Method, c.Path)
		}
	}
	for _, l := range r.Logs {
		if ev, _ := l["event"].(string); strings.Contains(ev, "Unable to decode message") || strings.Contains(ev, "Unhandled request") {
			t.Errorf("%s: the supervisor logged %q: %v", r.Name, ev, l)
		}
	}
	if r.IdleWaits > 0 {
		t.Errorf("%s: the supervisor saw every socket at EOF before it could see the process exit, and slept its whole wait (min_heartbeat_interval, 5 s) %d time(s) (the task took %.3f s): the bundle's exit holder (bundles.Exit, internal/exitorder) did not keep its output open until then; task log: %v", r.Name, r.IdleWaits, r.Seconds, r.Logs)
	}
}

// stateCalls are the bodies of PATCH task-instances/<id>/state, in order:
// succeed, retry and finish all end there.
func (r *result) stateCalls() []map[string]any {
	var out []map[string]any
	for _, c := range r.APICalls {
		if c.Method == "PATCH" && strings.HasSuffix(c.Path, "/state") {
			b, _ := c.Body.(map[string]any)
			out = append(out, b)
		}
	}
	return out
}

// renderedFields is the body of the one PUT task-instances/<id>/rtif the
// task made.
func (r *result) renderedFields(t *testing.T) map[string]any {
	t.Helper()
	var out []map[string]any
	for _, c := range r.APICalls {
		if c.Method == "PUT" && strings.HasSuffix(c.Path, "/rtif") {
			b, _ := c.Body.(map[string]any)
			out = append(out, b)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%s: %d rendered-fields calls, want 1: %v", r.Name, len(out), out)
	}
	return out[0]
}

// onlyState checks exactly one state call, with the given state.
func (r *result) onlyState(t *testing.T, want string) map[string]any {
	t.Helper()
	calls := r.stateCalls()
	if len(calls) != 1 || calls[0]["state"] != want {
		t.Fatalf("%s: state calls %v, want one with state %q", r.Name, calls, want)
	}
	if r.FinalState != want {
		t.Fatalf("%s: final state %q, want %q", r.Name, r.FinalState, want)
	}
	return calls[0]
}

// xcomPosts maps "task_id/key" to each value the task pushed.
func (r *result) xcomPosts() map[string]any {
	out := map[string]any{}
	for _, c := range r.APICalls {
		if c.Method == "POST" && strings.HasPrefix(c.Path, "xcoms/") {
			parts := strings.Split(c.Path, "/")
			out[parts[3]+"/"+parts[4]] = c.Body
		}
	}
	return out
}

// requestTypes lists the bundle's request types, in order.
func (r *result) requestTypes() []string {
	var out []string
	for _, b := range r.Requests {
		out = append(out, fmt.Sprint(b["type"]))
	}
	return out
}

// logged reports whether the task log holds an event containing text.
func (r *result) logged(text string) bool {
	for _, l := range r.Logs {
		for _, k := range []string{"event", "error"} {
			if s, _ := l[k].(string); strings.Contains(s, text) {
				return true
			}
		}
	}
	return false
}

// pyenvPython is the venv's interpreter, with AIRFLOW_HOME kept out of the
// developer's own ~/airflow for scripts that import Airflow.
func pyenvPython(t *testing.T) string {
	t.Helper()
	t.Setenv("AIRFLOW_HOME", filepath.Join(t.TempDir(), "airflow"))
	return pyenv.Python(t)
}
