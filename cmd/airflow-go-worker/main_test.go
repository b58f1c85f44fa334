package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/selftest"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/supervisor"

	"github.com/airflow-sandbox/airflow-go-worker/testing/makebuild"
	"github.com/airflow-sandbox/airflow-go-worker/testing/waitwriter"
)

// asBinaryEnv makes this test binary behave exactly as airflow-go-worker
// (realMain, the same function main calls) so end-to-end tests fork the
// real entry point without a separate build. init runs before any
// TestMain, and the variable is inherited, so `run` forking itself works.
const asBinaryEnv = "AIRFLOW_GO_WORKER_TEST_AS_BINARY"

func init() {
	if os.Getenv(asBinaryEnv) == "1" {
		os.Exit(realMain(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
}

type cliResult struct {
	code           int
	stdout, stderr string
}

// cli runs the binary (this test executable as airflow-go-worker).
func cli(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(deadline.Context(t), self, args...)
	cmd.Env = append(append(os.Environ(), asBinaryEnv+"=1"), env...)
	return runCommand(t, cmd)
}

// runCommand runs cmd and returns its exit code and output; only a
// failure to run it at all fails the test.
func runCommand(t *testing.T, cmd *exec.Cmd) cliResult {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return cliResult{code, out.String(), errb.String()}
}

func TestRunSingleTasks(t *testing.T) {
	state := t.TempDir()
	for _, tc := range []struct {
		args      []string
		env       []string
		code      int
		stdout    string
		stderr    string
		notStderr string
	}{
		{[]string{"run", "--dag", selftest.DagID, "--task", "ping"}, nil, 0, ": success", "pong", ""},
		{[]string{"run", "--dag", selftest.DagID, "--task", "fail"}, nil, 1, ": failed", "deliberate failure", ""},
		{[]string{"run", "--dag", selftest.DagID, "--task", "fail", "--retry"}, nil, 1, ": up_for_retry (selftest: deliberate failure", "", ""},
		{[]string{"run", "--dag", selftest.DagID, "--task", "connection", "--conf", `{"conn_id": "nope"}`}, nil, 1, ": failed", `connection \"nope\": connection not found`, ""},
		{[]string{"run", "--dag", selftest.DagID, "--task", "xcom_roundtrip", "--state", state, "--run-id", "r1"}, nil, 0, `return_value: {"hello":"airflow","n":42}`, "", ""},
		{[]string{"run", "--dag", selftest.DagID, "--task", "ping"}, []string{"AIRFLOW__LOGGING__LOGGING_LEVEL=WARNING"}, 0, ": success", "", "pong"},
		{[]string{"run", "--dag", selftest.DagID, "--task", "sleep", "--conf", `{"seconds": 0.01}`}, nil, 0, `"slept_seconds":0.01`, "", ""},
	} {
		r := cli(t, tc.env, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stdout, tc.stdout) || !strings.Contains(r.stderr, tc.stderr) ||
			(tc.notStderr != "" && strings.Contains(r.stderr, tc.notStderr)) {
			t.Errorf("%v: exit %d, want %d; stdout %q (want %q); stderr:\n%s", tc.args, r.code, tc.code, r.stdout, tc.stdout, r.stderr)
		}
	}
	// The XCom landed in the state directory, where the next run finds it.
	p := filepath.Join(state, "xcom", selftest.DagID, "r1", "xcom_roundtrip", "return_value.json")
	if data, err := os.ReadFile(p); err != nil || !strings.Contains(string(data), `"hello":"airflow"`) {
		t.Fatalf("state file %s: %v %s", p, err, data)
	}
}

func TestRunWholeDagStopsAtFirstFailure(t *testing.T) {
	r := cli(t, nil, "run", "--dag", selftest.DagID, "--run-id", "shared")
	if r.code != 1 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if !strings.HasPrefix(lines[0], selftest.DagID+".ping (run shared): success") {
		t.Fatalf("ping runs first: %q", r.stdout)
	}
	if !strings.Contains(r.stdout, "connection (run shared): failed") || strings.Contains(r.stdout, "xcom_roundtrip") {
		t.Fatalf("the run must stop at connection (no conn_id): %q", r.stdout)
	}
}

func TestRunSIGTERMReportsFailure(t *testing.T) {
	self, _ := os.Executable()
	cmd := exec.Command(self, "run", "--dag", selftest.DagID, "--task", "sleep", "--conf", `{"seconds": 60}`)
	cmd.Env = append(os.Environ(), asBinaryEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout = &out
	stderr := waitwriter.New("sleeping")
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stderr.Seen():
	case <-deadline.Context(t).Done():
		cmd.Process.Kill()
		t.Fatal("the sleep task never started")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	// An interrupted run exits 128+signal, as a shell reports it.
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Fatalf("want exit %d, got %v; stdout %q", 128+int(syscall.SIGTERM), err, out.String())
	}
	if !strings.Contains(out.String(), ": failed") {
		t.Fatalf("the task must still report an outcome: %q", out.String())
	}
	// A task that slept on through SIGTERM would end with its sleep as a
	// success, not as interrupted (above).
}

func TestCommandLineErrorsNameTheProblem(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no arguments"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"--bogus"}, `unknown argument "--bogus"`},
		{[]string{"--comm"}, "flag --comm needs a value"},
		{[]string{"--comm=127.0.0.1:1"}, "--comm and --logs are required"},
		{[]string{"--format", "json"}, "only valid with --airflow-metadata"},
		{[]string{"--airflow-metadata", "--format", "xml"}, `unknown --format "xml"`},
		{[]string{"--airflow-metadata", "--bundle-config", "/no/such/config.yaml"}, "--bundle-config: open /no/such/config.yaml"},
		{[]string{"--airflow-metadata", "--bundle-config"}, "--bundle-config needs a file name"},
		{[]string{"run"}, "--dag is required; this bundle's Dags are: airflow_go_worker_selftest"},
		{[]string{"run", "--dag", "nope"}, `--dag "nope" is not in this bundle; its Dags are: airflow_go_worker_selftest`},
		{[]string{"run", "--dag", selftest.DagID, "--task", "nope"}, `--task "nope" is not in Dag`},
		{[]string{"run", "--dag", selftest.DagID, "--conf", "[1]"}, "--conf must be a JSON object"},
		{[]string{"run", "--dag", selftest.DagID, "--frob"}, "-frob"},
		{[]string{"run", "--dag", selftest.DagID, "extra"}, `unexpected argument "extra"`},
		{[]string{"run", "--dag", selftest.DagID, "--task", "ping", "--connections", "/no/such/conns.yaml"}, "--connections: connections file: open /no/such/conns.yaml: no such file"},
		{[]string{"version", "x"}, "version takes no arguments"},
		{[]string{"run", "--dag", selftest.DagID, "--task", "ping", "--state", "/proc/no-state-here"}, "--state: mkdir /proc/no-state-here"},
		{[]string{"--bundle-config", "c.yaml", "inspect", "b.bundle"}, "inspect does not take --bundle-config"},
		{[]string{"--bundle-config", "c.yaml", "pack"}, "pack takes --config instead"},
	} {
		r := cli(t, nil, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d stderr %q; want exit 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

func TestMetadataAndVersion(t *testing.T) {
	r := cli(t, nil, "--airflow-metadata", "--format", "json")
	var m struct {
		SDK  map[string]string              `json:"sdk"`
		Dags map[string]map[string][]string `json:"dags"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &m) != nil {
		t.Fatalf("exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	if got := strings.Join(m.Dags[selftest.DagID]["tasks"], ","); got != "ping,connection,xcom_roundtrip,variable,fail,sleep" {
		t.Fatalf("selftest tasks %q", got)
	}
	if m.SDK["supervisor_schema_version"] != "2026-06-16" || m.SDK["language"] != "go" {
		t.Fatalf("sdk %v", m.SDK)
	}
	r = cli(t, nil, "version")
	if r.code != 0 || !strings.Contains(r.stdout, "supervisor schema 2026-06-16 (declared; speaks 2026-06-16 (Airflow 3.3), 2026-10-30 (Airflow 3.4))") || !strings.Contains(r.stdout, "go 1.") {
		t.Fatalf("version: %q", r.stdout)
	}
}

func TestCoordinatorModeThroughSupervisor(t *testing.T) {
	self, _ := os.Executable()
	s := &supervisor.Supervisor{Executable: self, Env: append(os.Environ(), asBinaryEnv+"=1")}
	ctx := context.Background()
	for task, want := range map[string]string{"ping": supervisor.StateSuccess, "fail": supervisor.StateFailed, "gone": supervisor.StateRemoved} {
		res, err := s.RunTask(ctx, supervisor.TaskRequest{DagID: selftest.DagID, TaskID: task})
		if err != nil || res.State != want {
			t.Errorf("%s: %v state %s, want %s", task, err, res.State, want)
		}
	}
	body, err := s.ParseTaskHandlers(ctx, "/dags/airflow-go-worker.bundle")
	if err != nil {
		t.Fatal(err)
	}
	if decl := body["task_handlers"].(map[string]any)[selftest.DagID].([]any); len(decl) != 6 {
		t.Fatalf("declarations %v", decl)
	}
}

// buildReal builds the actual binary as make build does (its default
// build), once per test or benchmark.
func buildReal(tb testing.TB) string {
	tb.Helper()
	out := filepath.Join(tb.TempDir(), "airflow-go-worker")
	makebuild.Build{Pkg: "."}.Must(tb, out)
	return out
}

func TestBuiltBinaryRunsSelftest(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	bin := buildReal(t)
	cmd := exec.Command(bin, "run", "--dag", selftest.DagID, "--task", "ping")
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), ": success") {
		t.Fatalf("%v: %s", err, out)
	}
}

// BenchmarkForkToTerminal measures one selftest ping through the supervisor:
// fork, connect, StartupDetails, SetXCom, SucceedTask, exit.
func BenchmarkForkToTerminal(b *testing.B) {
	bin := buildReal(b)
	s := &supervisor.Supervisor{Executable: bin, Env: []string{}}
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		res, err := s.RunTask(context.Background(), supervisor.TaskRequest{DagID: selftest.DagID, TaskID: "ping"})
		took = append(took, time.Since(start))
		if err != nil || res.State != supervisor.StateSuccess {
			b.Fatalf("ping ended %s, exit code %d (%v)\noutput: %q\nlog: %v\nterminal: %v", res.State, res.ExitCode, err, res.Output, res.LogLines, res.Terminal)
		}
	}
	// The target is a median; ns/op is a mean that one slow fork skews.
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "median-ms")
}

func TestRunUsesConnectionsFileAndEnv(t *testing.T) {
	file := filepath.Join(t.TempDir(), "conns.json")
	if err := os.WriteFile(file, []byte(`{"from_file": {"conn_type": "http", "host": "files.internal", "password": "file-pw-123"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r := cli(t, nil, "run", "--dag", selftest.DagID, "--task", "connection", "--conf", `{"conn_id": "from_file"}`, "--connections", file)
	if r.code != 0 || !strings.Contains(r.stdout, `"host":"files.internal"`) {
		t.Fatalf("exit %d: %s\n%s", r.code, r.stdout, r.stderr)
	}
	r = cli(t, []string{"AIRFLOW_CONN_FROM_ENV=http://u:env-pw-456@env.internal:81"}, "run", "--dag", selftest.DagID, "--task", "connection", "--conf", `{"conn_id": "from_env"}`)
	if r.code != 0 || !strings.Contains(r.stdout, `"port":81`) {
		t.Fatalf("exit %d: %s\n%s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout+r.stderr, "env-pw-456") {
		t.Fatal("password leaked")
	}
}
