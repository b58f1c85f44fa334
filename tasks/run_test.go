package tasks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

func provisioned(t *testing.T, e *env) string {
	t.Helper()
	id, err := Provision(context.Background(), e.deps, ProvisionInput{})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestRunStreamsOutputLineByLineAndReturnsTheTail(t *testing.T) {
	e := newEnv(t)
	id := provisioned(t, e)
	in := decodeInput[RunInput](t, `{"sandbox": "`+id+`", "command": ["echo one; echo two >&2", "printf 'three\\nfour'"]}`)
	res, err := RunCommands(context.Background(), e.deps, in)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || res.TimedOut || res.OutputTail != "three\nfour" {
		t.Fatalf("result %+v, want exit 0 and the last command's output", res)
	}
	log := e.log.String()
	for _, want := range []string{"one: stream=stdout", "two: stream=stderr", "three: stream=stdout", "four: stream=stdout"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

func TestRunFailsOnNonZeroExitUnlessAllowed(t *testing.T) {
	e := newEnv(t)
	id := provisioned(t, e)
	_, err := RunCommands(context.Background(), e.deps, RunInput{Sandbox: SandboxRef{ID: id}, Command: Commands{"echo boom; exit 3", "touch never"}})
	var ce *CommandError
	if !errors.As(err, &ce) || ce.Result.ExitCode != 3 || !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "allow_failure") {
		t.Fatalf("want a CommandError with exit 3, the output and the hint, got %v", err)
	}
	if _, err := os.Stat(e.drv.host(id, "/workspace/never")); err == nil {
		t.Error("commands after a failing one must not run")
	}
	res, err := RunCommands(context.Background(), e.deps, RunInput{Sandbox: SandboxRef{ID: id}, Command: Commands{"exit 4"}, AllowFailure: true})
	if err != nil || res.ExitCode != 4 {
		t.Fatalf("allow_failure: got %+v, %v; want exit 4 and no error", res, err)
	}
}

func TestRunTimeout(t *testing.T) {
	e := newEnv(t)
	id := provisioned(t, e)
	_, err := RunCommands(context.Background(), e.deps, decodeInput[RunInput](t, `{"sandbox": "`+id+`", "command": "sleep 5", "timeout": 0.2}`))
	var ce *CommandError
	if !errors.As(err, &ce) || !ce.Result.TimedOut || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("want a timed-out CommandError, got %v", err)
	}
}

func TestRunAcceptsTheRecordAndChecksOwnership(t *testing.T) {
	e := newEnv(t)
	id := provisioned(t, e)
	rec := `{"backend": "local", "id": "` + id + `", "name": "` + id + `", "workdir": "/workspace"}`
	res, err := RunCommands(context.Background(), e.deps, decodeInput[RunInput](t, `{"sandbox": `+rec+`, "command": "echo ok"}`))
	if err != nil || res.OutputTail != "ok\n" {
		t.Fatalf("run from a record: %+v, %v", res, err)
	}
	_, err = RunCommands(context.Background(), e.deps, decodeInput[RunInput](t, `{"sandbox": `+rec+`, "backend": "modal", "command": "true"}`))
	if err == nil || !strings.Contains(err.Error(), "local sandbox but backend is modal") {
		t.Fatalf("contradicting backend: %v", err)
	}
	other := e.deps
	other.Run.RunID = "another_run"
	_, err = RunCommands(context.Background(), other, RunInput{Sandbox: SandboxRef{ID: id}, Command: Commands{"true"}})
	if err == nil || !strings.Contains(err.Error(), "belongs to") {
		t.Fatalf("another run's task must not use the sandbox: %v", err)
	}
	for _, bad := range []string{"", "None"} {
		_, err = RunCommands(context.Background(), e.deps, RunInput{Sandbox: SandboxRef{ID: bad}, Command: Commands{"true"}})
		if err == nil || !strings.Contains(err.Error(), "bound to its XCom") {
			t.Fatalf("empty handle %q: %v", bad, err)
		}
	}
	_, err = RunCommands(context.Background(), e.deps, RunInput{Sandbox: SandboxRef{ID: id}})
	if err == nil || !strings.Contains(err.Error(), "nothing to run") {
		t.Fatalf("no command: %v", err)
	}
}

func TestRunOnAGoneSandbox(t *testing.T) {
	e := newEnv(t)
	id := provisioned(t, e)
	if _, err := Destroy(context.Background(), e.deps, DestroyInput{Sandbox: SandboxRef{ID: id}}); err != nil {
		t.Fatal(err)
	}
	_, err := RunCommands(context.Background(), e.deps, RunInput{Sandbox: SandboxRef{ID: id}, Command: Commands{"true"}})
	if !errors.Is(err, sandbox.ErrGone) || !strings.Contains(err.Error(), "no longer exists") {
		t.Fatalf("want ErrGone with advice, got %v", err)
	}
}

// collect runs as a teardown, so after a failed provision it gets no id;
// an unrendered template is the other common miswiring. Both must say what
// happened rather than look like a missing sandbox.
func TestNoSandboxIDIsExplained(t *testing.T) {
	e := newEnv(t)
	cases := map[string][]string{
		"":     {"returned none", "failed"},
		"None": {"returned none", "failed"},
		"{{ ti.xcom_pull(task_ids='provision') }}": {"template", "inputs: {sandbox: {xcom: <provision task_id>}}"},
	}
	for id, want := range cases {
		_, err := Collect(context.Background(), e.deps, CollectInput{Sandbox: SandboxRef{ID: id}, Exports: map[string]string{"a": "s3://out/a"}})
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("sandbox %q: error %v does not say %q", id, err, w)
			}
		}
	}
	if len(e.reqs) != 0 {
		t.Errorf("a backend was opened for no sandbox: %v", e.reqs)
	}
}

func TestDestroyIsIdempotent(t *testing.T) {
	e := newEnv(t)
	id := provisioned(t, e)
	for i := 0; i < 2; i++ {
		got, err := Destroy(context.Background(), e.deps, DestroyInput{Sandbox: SandboxRef{ID: id}})
		if err != nil || got != id {
			t.Fatalf("destroy #%d: %q, %v", i+1, got, err)
		}
	}
	if alive := e.drv.alive(); len(alive) != 0 {
		t.Fatalf("still alive: %v", alive)
	}
}

func TestDestroyWarnsWhenAnAgentHoldsTheSandbox(t *testing.T) {
	e := newEnv(t)
	id := provisioned(t, e)
	tags, _ := e.drv.Tags(context.Background(), id)
	tags[sandbox.TagHolder] = "dag_a/manual__2026-11-29T10:00:00+00:00/analyse"
	if err := e.drv.SetTags(context.Background(), id, tags); err != nil {
		t.Fatal(err)
	}
	if _, err := Destroy(context.Background(), e.deps, DestroyInput{Sandbox: SandboxRef{ID: id}}); err != nil {
		t.Fatal(err)
	}
	if log := e.log.String(); !strings.Contains(log, "still holds") || !strings.Contains(log, "/analyse") {
		t.Fatalf("the log does not say an agent held the sandbox:\n%s", log)
	}
}

func TestSweep(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	now := time.Now()
	mk := func(owner string, life time.Duration, createdByUs bool) string {
		spec := sandbox.Spec{Owner: owner, Lifetime: life}.WithDefaults()
		name := sandbox.NewName()
		spec.Tags = sandbox.OwnershipTags(name, spec, now)
		if !createdByUs {
			delete(spec.Tags, sandbox.TagCreatedBy)
		}
		info, err := e.drv.Create(ctx, name, spec)
		if err != nil {
			t.Fatal(err)
		}
		return info.ID
	}
	expired := mk("d/r1", time.Minute, true)
	finished := mk("d/r2", time.Hour, true)
	live := mk("d/r3", time.Hour, true)
	// The Python provider's: its name and expiry tag, no created-by mark.
	// It never sweeps its own, so sweep does.
	pyExpired := mk("d/r1", time.Minute, false)
	// Anyone else's: no airflow tags at all. Never touched.
	stranger, err := e.drv.Create(ctx, "someone-elses-sandbox", sandbox.Spec{Lifetime: time.Minute, Tags: map[string]string{"team": "x"}}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	later := now.Add(2 * time.Minute)

	res, err := sweepAt(ctx, e.deps, SweepInput{DryRun: true, FinishedRuns: []string{"d/r2"}}, later)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Found) != 3 || len(res.Destroyed) != 0 || res.Kept != 1 || len(e.drv.alive()) != 5 {
		t.Fatalf("dry run: %+v, alive %v", res, e.drv.alive())
	}
	reasons := map[string]string{}
	for _, f := range res.Found {
		reasons[f.ID] = f.Reason + " by " + f.Creator
	}
	if reasons[expired] != "expired by "+CreatorGoWorker || reasons[finished] != "run finished by "+CreatorGoWorker ||
		reasons[pyExpired] != "expired by "+CreatorPythonProvider {
		t.Fatalf("reasons %v", reasons)
	}

	res, err = sweepAt(ctx, e.deps, SweepInput{FinishedRuns: []string{"d/r2"}}, later)
	if err != nil {
		t.Fatal(err)
	}
	alive := strings.Join(e.drv.alive(), ",")
	if len(res.Destroyed) != 3 || strings.Contains(alive, expired) || strings.Contains(alive, finished) || strings.Contains(alive, pyExpired) ||
		!strings.Contains(alive, live) || !strings.Contains(alive, stranger.ID) {
		t.Fatalf("sweep destroyed %v, alive now %s", res.Destroyed, alive)
	}

	if _, err := sweepAt(ctx, e.deps, SweepInput{FinishedRuns: []string{"no-slash"}}, later); err == nil {
		t.Fatal("a malformed finished run must be refused")
	}
	e.drv.failDestroy = errors.New("api down")
	_, err = sweepAt(ctx, e.deps, SweepInput{FinishedRuns: []string{"d/r3"}}, later)
	if err == nil || !strings.Contains(err.Error(), live) || !strings.Contains(err.Error(), "api down") {
		t.Fatalf("a failed destroy must fail the sweep naming the sandbox: %v", err)
	}
}

// A later task's command that prints a secret provision put in the sandbox
// must not leak it into that task's log or XCom.
func TestRunRedactsTheSandboxSecrets(t *testing.T) {
	e := newEnv(t)
	const secret = "tok-9f8e7d6c5b4a"
	e.af.conns["api"] = connections.Connection{ConnID: "api", Password: secret}
	id, err := Provision(context.Background(), e.deps, decodeInput[ProvisionInput](t, `{"env_from": {"API_TOKEN": {"connection": "api"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	tags, _ := e.drv.Tags(context.Background(), id)
	if tags[TagEnvFrom] != `{"API_TOKEN":{"connection":"api"}}` || strings.Contains(tags[TagEnvFrom], secret) {
		t.Fatalf("%s tag = %q", TagEnvFrom, tags[TagEnvFrom])
	}

	// The run task is another process: a fresh masker, a fresh log.
	later := newEnv(t)
	later.af.conns = e.af.conns
	later.drv, later.deps.Backends = e.drv, e.drv.opener(nil)
	res, err := RunCommands(context.Background(), later.deps, RunInput{Sandbox: SandboxRef{ID: id}, Command: Commands{`echo "token is $API_TOKEN"; echo "$API_TOKEN" >&2; exit 1`}, AllowFailure: true})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res.OutputTail, secret) || !strings.Contains(res.OutputTail, "token is ***") {
		t.Fatalf("output tail %q leaks or lost the line", res.OutputTail)
	}
	if strings.Contains(later.log.String(), secret) || !strings.Contains(later.log.String(), "token is ***") {
		t.Fatalf("task log leaks the secret:\n%s", later.log.String())
	}
	if len(later.af.masked) != 1 || later.af.masked[0] != secret {
		t.Fatalf("the run task must register the secret with its own masker, masked %d values", len(later.af.masked))
	}
	_, err = RunCommands(context.Background(), later.deps, RunInput{Sandbox: SandboxRef{ID: id}, Command: Commands{`echo "$API_TOKEN"; exit 3`}})
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("the failure message leaks the secret: %v", err)
	}
}

// chunkDriver delivers a command's output as a remote backend may: in
// chunks that cut lines anywhere, the two streams interleaved.
type chunkDriver struct {
	*dirDriver
	chunks []struct {
		stderr bool
		data   string
	}
}

func (d *chunkDriver) Exec(_ context.Context, _ string, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	for _, c := range d.chunks {
		w := req.Stdout
		if c.stderr {
			w = req.Stderr
		}
		io.WriteString(w, c.data)
	}
	return sandbox.ExecResult{}, nil
}

// A secret that reaches the worker in two chunks, with the other stream's
// output between them, is redacted from the output tail (which goes to
// XCom) as well as from the log.
func TestRunRedactsASecretSplitAcrossChunks(t *testing.T) {
	e := newEnv(t)
	const secret = "tok-9f8e7d6c5b4a"
	e.af.conns["api"] = connections.Connection{ConnID: "api", Password: secret}
	id, err := Provision(context.Background(), e.deps, decodeInput[ProvisionInput](t, `{"env_from": {"API_TOKEN": {"connection": "api"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	cd := &chunkDriver{dirDriver: e.drv, chunks: []struct {
		stderr bool
		data   string
	}{
		{false, "token is tok-9f8e"}, {true, "warming up\n"}, {false, "7d6c5b4a\ndone\n"},
	}}
	e.deps.Backends = backendsFor(cd, nil)
	res, err := RunCommands(context.Background(), e.deps, RunInput{Sandbox: SandboxRef{ID: id}, Command: Commands{"print-token"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res.OutputTail, "tok-9f8e") || strings.Contains(res.OutputTail, "7d6c5b4a") || !strings.Contains(res.OutputTail, "token is ***") {
		t.Fatalf("output tail %q shows the secret, or lost the line", res.OutputTail)
	}
	if !strings.Contains(res.OutputTail, "warming up") || !strings.Contains(res.OutputTail, "done") {
		t.Fatalf("output tail %q lost the other lines", res.OutputTail)
	}
	if log := e.log.String(); strings.Contains(log, "tok-9f8e") || strings.Contains(log, "7d6c5b4a") {
		t.Fatalf("the log shows the secret:\n%s", log)
	}
}

// When a secret the sandbox holds can no longer be read, run cannot
// redact it from the output, so it refuses to run rather than risk
// printing it to the log and XCom.
func TestRunRefusesWhenASandboxSecretCannotBeReRead(t *testing.T) {
	e := newEnv(t)
	e.af.vars["api_token"] = "tok-9f8e7d6c5b4a"
	id, err := Provision(context.Background(), e.deps, decodeInput[ProvisionInput](t, `{"env_from": {"API_TOKEN": {"variable": "api_token"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	delete(e.af.vars, "api_token")
	_, err = RunCommands(context.Background(), e.deps, RunInput{Sandbox: SandboxRef{ID: id}, Command: Commands{`touch ran; echo "$API_TOKEN"`}})
	if err == nil || !strings.Contains(err.Error(), "env_from.API_TOKEN") || !strings.Contains(err.Error(), "refusing") {
		t.Fatalf("want a refusal naming the secret's source, got %v", err)
	}
	if _, err := os.Stat(e.drv.host(id, "/workspace/ran")); err == nil {
		t.Fatal("the command ran although its output could not be redacted")
	}
}

func TestTruncatedTailStartsAtALine(t *testing.T) {
	e := newEnv(t)
	id := provisioned(t, e)
	res, err := RunCommands(context.Background(), e.deps, RunInput{Sandbox: SandboxRef{ID: id},
		Command: Commands{fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "line-$i-abcdefghij"; i=$((i+1)); done`, DefaultOutputTail/10)}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.OutputTail, "line-") || len(res.OutputTail) > DefaultOutputTail {
		t.Fatalf("tail starts mid-line or is too long: %q...", res.OutputTail[:40])
	}
}

// A sweep at the end of a run names its own run as finished with
// "{dag_id}/{run_id}": it removes that run's sandboxes and no other's.
func TestSweepOfItsOwnRun(t *testing.T) {
	e := newEnv(t)
	mine, err := Provision(context.Background(), e.deps, ProvisionInput{})
	if err != nil {
		t.Fatal(err)
	}
	other := e.deps
	other.Run.RunID = "manual__other"
	theirs, err := Provision(context.Background(), other, ProvisionInput{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Sweep(context.Background(), e.deps, SweepInput{FinishedRuns: []string{"{dag_id}/{run_id}"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Destroyed) != 1 || res.Destroyed[0] != mine || !slices.Contains(e.drv.alive(), theirs) {
		t.Fatalf("destroyed %v, alive %v; want only %s gone", res.Destroyed, e.drv.alive(), mine)
	}
}

// A run task declared as a branch follows the task ids its command printed
// last.
func TestRunResultFollowsTheLastLinePrinted(t *testing.T) {
	for tail, want := range map[string][]string{
		"checking rows\nload\n": {"load"},
		"n=3\nload, report\n":   {"load", "report"},
		"load report":           {"load", "report"},
		"":                      nil,
		"load\n\n\n":            {"load"},
		"ok\r\nload\r\n":        {"load"},
	} {
		if got := (RunResult{OutputTail: tail}).FollowTasks(); !slices.Equal(got, want) {
			t.Errorf("%q: follows %q, want %q", tail, got, want)
		}
	}
}
