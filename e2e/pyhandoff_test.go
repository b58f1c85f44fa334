package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/supervisor"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/pyenv"
	"github.com/airflow-sandbox/airflow-go-worker/testing/syncbuf"
)

// pyAgent is python/handoff/agent.py running the real common.ai provider
// (AgentOperator, SandboxToolset, ModalSandboxBackend) against the world's
// fake Modal. It prints one JSON event per line.
type pyAgent struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  *bufio.Scanner
	stderr *syncbuf.Buffer
	cancel context.CancelFunc
}

func (w *world) startPython(args ...string) *pyAgent {
	w.t.Helper()
	ctx, cancel := deadline.Bound(w.t, context.Background()) // a stuck agent is killed near the test's deadline, never waited on forever
	a := &pyAgent{t: w.t, stderr: &syncbuf.Buffer{}, cancel: cancel}
	a.cmd = pyenv.Command(ctx, w.t, nil, "handoff/agent.py", args...)
	// The Modal client reaches the fake through MODAL_SERVER_URL (in
	// w.env); the token comes from the modal_default connection, as in a
	// deployment, not from MODAL_TOKEN_*.
	conn, _ := json.Marshal(w.conns["modal_default"])
	a.cmd.Env = append(append([]string{}, w.env...), "AIRFLOW_CONN_MODAL_DEFAULT="+string(conn))
	a.cmd.Stderr = a.stderr
	stdout, err := a.cmd.StdoutPipe()
	if err != nil {
		w.t.Fatal(err)
	}
	if a.stdin, err = a.cmd.StdinPipe(); err != nil {
		w.t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	a.lines = bufio.NewScanner(stdout)
	a.lines.Buffer(make([]byte, 1<<20), 1<<20)
	w.t.Cleanup(func() {
		cancel()
		a.cmd.Wait() //nolint:errcheck // reaped; its outcome was read from stdout
		if w.t.Failed() {
			w.t.Logf("agent.py stderr:\n%s", a.stderr.String())
		}
	})
	return a
}

// next decodes the next event, which must be of the given kind.
func (a *pyAgent) next(kind string, into any) {
	a.t.Helper()
	for a.lines.Scan() {
		var head struct{ Event string }
		if json.Unmarshal(a.lines.Bytes(), &head) != nil || head.Event == "" {
			continue // a library printing to stdout
		}
		if head.Event != kind {
			a.t.Fatalf("agent.py sent %s, want %s: %s", head.Event, kind, a.lines.Bytes())
		}
		if err := json.Unmarshal(a.lines.Bytes(), into); err != nil {
			a.t.Fatal(err)
		}
		return
	}
	a.t.Fatalf("agent.py ended before its %s event: %v\nstderr:\n%s", kind, a.lines.Err(), a.stderr.String())
}

func (a *pyAgent) resume() {
	if _, err := io.WriteString(a.stdin, "go\n"); err != nil {
		a.t.Fatal(err)
	}
}

type pyAttached struct {
	Owner, Holder, Workdir string
	RemainingLifetime      float64 `json:"remaining_lifetime"`
	Network                *struct {
		BlockNetwork       bool     `json:"block_network"`
		AllowEgressTo      []string `json:"allow_egress_to"`
		AllowEgressToCIDRs []string `json:"allow_egress_to_cidrs"`
	}
}

type pyDone struct {
	OK                     bool
	Error, Message, Output string
	AttachTo               string     `json:"attach_to"`
	Attached               pyAttached `json:"attached"`
	RunCommandDescription  string     `json:"run_command_description"`
	Returns                []string
	Results                map[string]struct {
		Refused        bool
		Error, Message string
	}
}

// What agent.py's scripted model writes as report.md.
const pyReport = "# Top customers\n\n1. umbrella (3 orders)\n2. initech (2 orders)\n\nWritten by the Python agent.\n"

// The handoff of examples/agent_handoff with both real clients: the Go
// bundle provisions on (fake) Modal; the real AgentOperator runs the
// common.ai SandboxToolset(ModalSandboxBackend(), attach_to=...) on
// Modal's real Python client, refusing what it must, attaching with the
// run's owner and its own holder, using the four tools and releasing; the
// Go bundle collects report.md to S3 and destroys the sandbox.
func TestPythonAgentHandoff(t *testing.T) {
	w := newWorld(t, "modal")
	w.putObject("incoming/orders.csv", ordersCSV)
	sup := w.supervisor(workerBin, "../examples/agent_handoff/bundle.yaml")
	const dag, run = "sandbox_agent_handoff", "manual__python-agent"
	owner, holder := dag+"/"+run, dag+"/"+run+"/analyse"
	w.runTask(sup, supervisor.TaskRequest{DagID: dag, TaskID: "provision", RunID: run}, supervisor.StateSuccess)
	id := w.xcom(sup, dag, run, "provision", "return_value").(string)
	drv := w.driverFor("modal")
	ctx := context.Background()

	// Refusals, while a Go task holds the sandbox.
	const goHolder = dag + "/" + run + "/go_review"
	if _, _, err := sandbox.NewBackend(drv).Attach(ctx, id, owner, goHolder); err != nil {
		t.Fatal(err)
	}
	var refused pyDone
	w.startPython("refuse", "--handle", id, "--dag", dag, "--run", run, "--task", "analyse").next("done", &refused)
	for name, want := range map[string]string{
		"wrong_owner":        "is not owned by '" + dag + "/manual__someone-else': it carries owner '" + owner + "'",
		"held":               "already held by '" + goHolder + "'",
		"local_handle":       `"airflow-sandbox-0123456789ab" is not a Modal sandbox id`,
		"opensandbox_handle": `"3f0c3a3e-5a36-4b8e-9d5c-2f1a6f1f0b8d" is not a Modal sandbox id`,
		"malformed":          `"sb-not a sandbox" is not a Modal sandbox id`,
		"none":               "attach_to rendered to 'None', which is not a sandbox handle",
		"empty":              "attach_to must be a sandbox handle",
	} {
		r := refused.Results[name]
		if !r.Refused || !strings.Contains(r.Message, want) {
			t.Errorf("attach %s: %+v; want a refusal saying %q", name, r, want)
		}
	}
	if tags, _ := sandbox.NewBackend(drv).Open(id).Tags(ctx); tags[sandbox.TagHolder] != goHolder {
		t.Fatalf("a refused attach changed the holder: %v", tags)
	}
	if err := sandbox.NewBackend(drv).Release(ctx, id, goHolder); err != nil {
		t.Fatal(err)
	}
	// The same bad handles, attached from Go.
	for handle, want := range map[string]string{
		"airflow-sandbox-0123456789ab":         "is not a Modal sandbox id",
		"3f0c3a3e-5a36-4b8e-9d5c-2f1a6f1f0b8d": "is not a Modal sandbox id",
		"sb-not a sandbox":                     "is not a Modal sandbox id",
	} {
		if _, _, err := sandbox.NewBackend(drv).Attach(ctx, handle, owner, goHolder); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Go attach to %q: %v; want an error saying %q", handle, err, want)
		}
	}

	// The agent attaches; while it holds the sandbox, Go sees its claim
	// and is refused as any second holder is.
	agent := w.startPython("agent", "--handle", id, "--dag", dag, "--run", run, "--task", "analyse", "--pause")
	var att pyAttached
	agent.next("attached", &att)
	if att.Owner != owner || att.Holder != holder || att.Workdir != "/workspace" ||
		att.Network == nil || !att.Network.BlockNetwork || len(att.Network.AllowEgressTo)+len(att.Network.AllowEgressToCIDRs) != 0 ||
		att.RemainingLifetime < 7000 || att.RemainingLifetime > 7200 {
		t.Fatalf("Python attached with %+v; want owner %q, holder %q, workdir /workspace, a blocked network and ~2h left", att, owner, holder)
	}
	if tags, _ := sandbox.NewBackend(drv).Open(id).Tags(ctx); tags[sandbox.TagHolder] != holder {
		t.Fatalf("while Python is attached the tags are %v", tags)
	}
	if _, _, err := sandbox.NewBackend(drv).Attach(ctx, id, owner, goHolder); err == nil || !strings.Contains(err.Error(), "already held by \""+holder+"\"") {
		t.Fatalf("Go attached while Python held the sandbox: %v", err)
	}
	agent.resume()
	var done pyDone
	agent.next("done", &done)
	if !done.OK || done.AttachTo != id {
		t.Fatalf("the agent run failed: %+v", done)
	}
	// The four tools, as the model saw their results.
	if len(done.Returns) != 4 {
		t.Fatalf("tool results %q", done.Returns)
	}
	if want := fmt.Sprintf("[stdout]\n/workspace\n%d\negress=blocked", strings.Count(ordersCSV, "\n")); !strings.HasPrefix(done.Returns[0], want) {
		t.Errorf("run_command saw %q, want the workdir, the staged orders.csv and no egress (%q)", done.Returns[0], want)
	}
	if !strings.Contains(done.Returns[1], fmt.Sprintf("Wrote %d bytes to 'report.md'", len(pyReport))) {
		t.Errorf("write_file: %q", done.Returns[1])
	}
	if !strings.HasPrefix(done.Returns[2], strings.TrimSuffix(pyReport, "\n")) {
		t.Errorf("read_file: %q", done.Returns[2])
	}
	if lines := strings.Fields(done.Returns[3]); !contains(lines, "orders.csv") || !contains(lines, "report.md") {
		t.Errorf("list_directory: %q", done.Returns[3])
	}
	// The model is told the network policy Go set and the lifetime left.
	if d := done.RunCommandDescription; !strings.Contains(d, "NO network access") || !strings.Contains(d, "set up by an earlier task") {
		t.Errorf("run_command description: %q", d)
	}
	if tags, _ := sandbox.NewBackend(drv).Open(id).Tags(ctx); tags[sandbox.TagHolder] != "" || tags[sandbox.TagOwner] != owner {
		t.Fatalf("after the agent released: tags %v", tags)
	}

	w.runTask(sup, supervisor.TaskRequest{DagID: dag, TaskID: "collect", RunID: run}, supervisor.StateSuccess)
	if got, ok := w.getObject("reports/" + run + "/report.md"); !ok || got != pyReport {
		t.Fatalf("report.md in S3: %q (found %v), want what the Python agent wrote: %q", got, ok, pyReport)
	}
	if alive := w.alive("modal"); len(alive) != 0 {
		t.Fatalf("collect left %v alive", alive)
	}
}

// What a Go destroy does while a Python agent holds the sandbox: it goes
// ahead, logging the holder (destroy runs after the agent as a
// teardown, all_done_setup_success, so a holder left then is an agent that died without
// releasing, and refusing would leave a billed sandbox behind until its
// lifetime ends). An agent that is in fact still running then fails on
// its next tool call with a terminal error saying the sandbox has ended,
// and its release is a no-op: Airflow's retry of it fails the same way,
// never silently on a fresh sandbox.
func TestGoDestroyWhilePythonHolds(t *testing.T) {
	w := newWorld(t, "modal")
	sup := w.configSupervisor("pydestroy.yaml", `
dags:
  py_destroy:
    tasks:
      provision: {kind: provision, defaults: {backend: modal, lifetime: 1h, workdir: /workspace}}
      destroy: {kind: destroy, defaults: {backend: modal}, inputs: {sandbox: {xcom: provision}}}
`)
	const dag, run = "py_destroy", "manual__held"
	w.runTask(sup, supervisor.TaskRequest{DagID: dag, TaskID: "provision", RunID: run}, supervisor.StateSuccess)
	id := w.xcom(sup, dag, run, "provision", "return_value").(string)

	agent := w.startPython("agent", "--handle", id, "--dag", dag, "--run", run, "--task", "analyse", "--pause")
	var att pyAttached
	agent.next("attached", &att)
	w.runTask(sup, supervisor.TaskRequest{DagID: dag, TaskID: "destroy", RunID: run}, supervisor.StateSuccess)
	if log := w.logs.String(); !strings.Contains(log, "destroying a sandbox an agent task still holds") || !strings.Contains(log, att.Holder) {
		t.Fatalf("destroy did not name the holder it went past:\n%s", log)
	}
	if alive := w.alive("modal"); len(alive) != 0 {
		t.Fatalf("destroy left %v alive", alive)
	}
	agent.resume()
	var done pyDone
	agent.next("done", &done)
	// Modal's client reports a finished sandbox as "already finished"
	// (ConflictError) before a command, NotFound during one; the provider
	// makes either terminal.
	if done.OK || done.Error != "SandboxTerminalError" || !strings.Contains(done.Message, "The Modal sandbox is") ||
		!(strings.Contains(done.Message, "already finished") || strings.Contains(done.Message, "gone")) {
		t.Fatalf("the agent's run on a destroyed sandbox ended %+v; want a terminal error saying the sandbox ended", done)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
