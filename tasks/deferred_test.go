package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/local"
	"github.com/airflow-sandbox/airflow-go-worker/testing/eventually"
)

// deferredErr is what the test's Defer returns: the state, as JSON.
type deferredErr struct{ state string }

func (e *deferredErr) Error() string { return "deferred" }

// deferrableEnv is an env whose tasks may defer: Defer records the state,
// which the test hands back as Resumed, as the runtime would.
func deferrableEnv(t *testing.T) *env {
	t.Setenv(local.SameHostResumesEnv, "1")
	e := newEnv(t)
	// Registered after newEnv's cleanups, so it runs before them: the
	// sandbox root goes only once the keepers of detached commands (which
	// end a moment after their command) have exited.
	t.Cleanup(func() {
		eventually.True(t, "the detached commands' keepers to exit", func() bool { return keepers() == 0 })
	})
	e.deps.Defer = func(poll time.Duration, state any) error {
		if poll != 2*time.Second {
			t.Errorf("deferred for %s, want the task's poll_interval", poll)
		}
		data, err := json.Marshal(state)
		if err != nil {
			t.Fatal(err)
		}
		return &deferredErr{string(data)}
	}
	return e
}

// keepers counts the local backend's keeper processes of this test binary.
func keepers() int {
	n := 0
	self, _ := os.Executable()
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		cmdline, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		exe, _ := os.Readlink("/proc/" + d.Name() + "/exe")
		if err == nil && exe == self && strings.Contains(string(cmdline), "__airflow_go_worker_local_detached__") {
			n++
		}
	}
	return n
}

// resumeToEnd calls task until it no longer defers, each time with the
// state it deferred with, and says how many times it deferred.
func resumeToEnd[Out any](t *testing.T, e *env, task func(Deps) (Out, error)) (Out, int, error) {
	t.Helper()
	d := e.deps
	for n := 0; ; n++ {
		out, err := task(d)
		var de *deferredErr
		if !errors.As(err, &de) {
			return out, n, err
		}
		d.Resumed = de.state
	}
}

// A deferrable run starts its command detached and defers; resume by
// resume, every line it prints reaches the log exactly once and whole
// (a line printed in two pieces across polls too), and the task ends as
// the command does.
func TestDeferrableRunLogsEveryLineOnceAcrossPolls(t *testing.T) {
	e := deferrableEnv(t)
	id := provisioned(t, e)
	in := decodeInput[RunInput](t, `{"sandbox": "`+id+`", "deferrable": true, "poll_interval": "2s", "command": [
		"for i in 1 2 3 4 5 6 7 8; do echo line$i; echo err$i >&2; sleep 0.3; done; printf half; sleep 0.5; echo -way",
		"echo second"]}`)
	res, deferrals, err := resumeToEnd(t, e, func(d Deps) (RunResult, error) { return RunCommands(context.Background(), d, in) })
	if err != nil {
		t.Fatal(err)
	}
	if deferrals < 3 || res.ExitCode != 0 || !strings.Contains(res.OutputTail, "second") {
		t.Fatalf("%d deferrals (want the first command seen running at least once), result %+v", deferrals, res)
	}
	log := e.log.String()
	for i := 1; i <= 8; i++ {
		for _, want := range []string{fmt.Sprintf("line%d: stream=stdout", i), fmt.Sprintf("err%d: stream=stderr", i)} {
			if n := strings.Count(log, want); n != 1 {
				t.Errorf("%q is in the log %d times, want once", want, n)
			}
		}
	}
	if strings.Count(log, "half-way: stream=stdout") != 1 || strings.Count(log, "second: stream=stdout") != 1 {
		t.Errorf("the line printed in two pieces is not logged once and whole:\n%s", log)
	}
}

// A failing command fails the task as without deferral; allow_failure
// accepts it; a command past its timeout is stopped and reported.
func TestDeferrableRunEndsAsTheCommandDoes(t *testing.T) {
	e := deferrableEnv(t)
	id := provisioned(t, e)
	run := func(js string) (RunResult, error) {
		in := decodeInput[RunInput](t, `{"sandbox": "`+id+`", "deferrable": true, "poll_interval": "2s", `+js+`}`)
		res, _, err := resumeToEnd(t, e, func(d Deps) (RunResult, error) { return RunCommands(context.Background(), d, in) })
		return res, err
	}
	_, err := run(`"command": ["echo boom; exit 3", "touch never"]`)
	var ce *CommandError
	if !errors.As(err, &ce) || ce.Result.ExitCode != 3 || !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "allow_failure") {
		t.Fatalf("want a CommandError with exit 3, its output and the hint, got %v", err)
	}
	if res, err := run(`"command": "exit 4", "allow_failure": true`); err != nil || res.ExitCode != 4 {
		t.Fatalf("allow_failure: %+v, %v", res, err)
	}
	res, err := run(`"command": "sleep 60", "timeout": "1s"`)
	if !errors.As(err, &ce) || !res.TimedOut {
		t.Fatalf("a command past its timeout: %+v, %v", res, err)
	}
}

// The faults: a resume that finds the sandbox gone fails for good; a
// resume state the task did not write fails for good; and the local
// backend refuses deferrable unless the operator says resumes stay on
// this host, before starting anything.
func TestDeferrableRunFaults(t *testing.T) {
	e := deferrableEnv(t)
	id := provisioned(t, e)
	in := decodeInput[RunInput](t, `{"sandbox": "`+id+`", "deferrable": true, "poll_interval": "2s", "command": "sleep 60"}`)
	_, err := RunCommands(context.Background(), e.deps, in)
	var de *deferredErr
	if !errors.As(err, &de) {
		t.Fatalf("the first run did not defer: %v", err)
	}
	if err := e.drv.Destroy(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	d := e.deps
	d.Resumed = de.state
	_, err = RunCommands(context.Background(), d, in)
	if !sandbox.IsFinal(err) || !strings.Contains(err.Error(), "no longer exists") && !strings.Contains(err.Error(), "is gone") {
		t.Fatalf("a resume on a destroyed sandbox: %v", err)
	}

	id = provisioned(t, e)
	in.Sandbox = SandboxRef{ID: id}
	d.Resumed = `{"step": "one"}`
	if _, err = RunCommands(context.Background(), d, in); !sandbox.IsFinal(err) || !strings.Contains(err.Error(), "clear the task instance") {
		t.Fatalf("a bad resume state: %v", err)
	}

	t.Setenv(local.SameHostResumesEnv, "")
	_, err = RunCommands(context.Background(), e.deps, in)
	if !sandbox.IsFinal(err) || !strings.Contains(err.Error(), local.SameHostResumesEnv) || !strings.Contains(err.Error(), "another worker") {
		t.Fatalf("the local backend took a deferrable task: %v", err)
	}
}

// A deferrable conversion provisions, runs its command detached across
// resumes, exports and destroys its sandbox, as the conversion does
// without deferral.
func TestDeferrableConvert(t *testing.T) {
	e := deferrableEnv(t)
	e.st.objects["s3://in/doc.txt"] = []byte("hello world\n")
	in := decodeInput[ConvertInput](t, `{"deferrable": true, "poll_interval": "2s",
		"stage_in": {"in/doc.txt": "s3://in/doc.txt"},
		"command": ["sleep 1; tr a-z A-Z < in/doc.txt > out.txt; echo converted"],
		"exports": {"out.txt": "s3://out/doc.upper.txt"}}`)
	res, deferrals, err := resumeToEnd(t, e, func(d Deps) (ConvertResult, error) { return Convert(context.Background(), d, in) })
	if err != nil {
		t.Fatal(err)
	}
	if deferrals < 2 || string(e.st.objects["s3://out/doc.upper.txt"]) != "HELLO WORLD\n" || len(res.URLs) != 1 || !strings.Contains(res.OutputTail, "converted") {
		t.Fatalf("%d deferrals, result %+v", deferrals, res)
	}
	if alive := e.drv.alive(); len(alive) != 0 {
		t.Fatalf("convert left %v alive", alive)
	}
	in.Command = Commands{"echo broken >&2; exit 2"}
	_, _, err = resumeToEnd(t, e, func(d Deps) (ConvertResult, error) { return Convert(context.Background(), d, in) })
	if err == nil || !strings.Contains(err.Error(), "nothing was exported") || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("a failing deferrable conversion: %v", err)
	}
	if alive := e.drv.alive(); len(alive) != 0 {
		t.Fatalf("a failed deferrable conversion left %v alive", alive)
	}
}

// A deferrable conversion the backend refuses (local, with no word that
// resumes stay on this host) fails for good, naming the setting, and leaves
// no sandbox; it never defers with a command it did not start.
func TestDeferrableConvertRefusedByTheBackend(t *testing.T) {
	e := deferrableEnv(t)
	t.Setenv(local.SameHostResumesEnv, "")
	in := decodeInput[ConvertInput](t, `{"deferrable": true, "poll_interval": "2s", "command": ["echo hi"], "exports": {"out.txt": "s3://out/x.txt"}}`)
	_, err := Convert(context.Background(), e.deps, in)
	var de *deferredErr
	if errors.As(err, &de) || !sandbox.IsFinal(err) || !strings.Contains(err.Error(), local.SameHostResumesEnv) {
		t.Fatalf("a refused deferrable conversion: %v", err)
	}
	if alive := e.drv.alive(); len(alive) != 0 {
		t.Fatalf("a refused deferrable conversion left %v alive", alive)
	}
}

// The command log limit is the task's, across resumes: each resume starts
// from the budget the last one left, so the lines logged stop at the cap
// and the warning comes once, however often the task deferred.
func TestDeferrableRunLogLimitSpansResumes(t *testing.T) {
	t.Setenv(CommandLogLimitEnv, "1KiB") // 16 short lines (minLineCost each)
	e := deferrableEnv(t)
	id := provisioned(t, e)
	in := decodeInput[RunInput](t, `{"sandbox": "`+id+`", "deferrable": true, "poll_interval": "2s",
		"command": "i=0; while [ $i -lt 200 ]; do i=$((i+1)); echo l$i; [ $((i % 25)) = 0 ] && sleep 0.3; done; true"}`)
	res, deferrals, err := resumeToEnd(t, e, func(d Deps) (RunResult, error) { return RunCommands(context.Background(), d, in) })
	if err != nil {
		t.Fatal(err)
	}
	log := e.log.String()
	logged := strings.Count(log, "stream=stdout")
	if deferrals < 3 || logged != 16 || res.OutputLinesDropped != 184 {
		t.Fatalf("%d deferrals, %d lines logged (want 16), %d dropped (want 184):\n%s", deferrals, logged, res.OutputLinesDropped, log)
	}
	if n := strings.Count(log, "reached this task's log limit"); n != 1 {
		t.Fatalf("the limit's warning is in the log %d times, want once", n)
	}
}
