package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/selftest"
	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"
	"github.com/airflow-sandbox/airflow-go-worker/testing/waitwriter"
)

// packedPlainBundle builds a bundle of plain Go tasks (no catalogue) and
// packs it: the executable and the bundle file.
func packedPlainBundle(t *testing.T) (exe, file string) {
	t.Helper()
	dir := t.TempDir()
	exe = filepath.Join(dir, "plainbundle")
	if out, err := exec.Command("go", "build", "-o", exe, "../../e2e/startup/internal/plainbundle").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	file = filepath.Join(dir, "plain.bundle")
	if _, _, err := pack(t, "--executable", exe, "--output", file); err != nil {
		t.Fatal(err)
	}
	return exe, file
}

// run --bundle runs another AFBNDL01 bundle, whose tasks come from its
// manifest, and serves --var variables over the comm socket only.
func TestRunBundleFile(t *testing.T) {
	exe, file := packedPlainBundle(t)
	prog := Program{Name: "host", Bundle: func() (*bundles.Bundle, error) {
		return nil, errors.New("run --bundle must not build this program's own bundle")
	}}
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := prog.Run(context.Background(), append([]string{"run", "--bundle", file}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	os.Unsetenv("AIRFLOW_VAR_" + strings.ToUpper(selftest.DefaultVariableKey))
	code, out, errs := run("--dag", selftest.DagID, "--task", "variable", "--var", selftest.DefaultVariableKey+"=s3cret")
	if code != 0 || !strings.Contains(out, `"found":true`) || !strings.Contains(out, `"length":6`) {
		t.Fatalf("exit %d; want the variable found over the socket:\n%s\n%s", code, out, errs)
	}
	if strings.Contains(out+errs, "s3cret") {
		t.Fatalf("the variable's value reached the output:\n%s\n%s", out, errs)
	}
	code, out, _ = run("--dag", "plain", "--task", "shout", "--conf", `{}`)
	if code != 0 || !strings.Contains(out, "plain.shout") {
		t.Fatalf("the bundle's own task: exit %d\n%s", code, out)
	}
	if code, _, errs := run("--dag", "plain", "--task", "whisper"); code == 0 || !strings.Contains(errs, `its tasks are: shout`) {
		t.Fatalf("a task the manifest does not list: exit %d, %s", code, errs)
	}
	if code, _, errs := run("--dag", "nope"); code == 0 || !strings.Contains(errs, selftest.DagID) {
		t.Fatalf("an unknown Dag must list the manifest's: exit %d, %s", code, errs)
	}
	var errb bytes.Buffer
	if code := prog.Run(context.Background(), []string{"run", "--bundle", exe, "--dag", "plain"}, &bytes.Buffer{}, &errb); code == 0 || !strings.Contains(errb.String(), "--bundle") {
		t.Fatalf("a plain binary is no bundle: exit %d, %s", code, errb.String())
	}
}

// An interrupted run exits as a shell reports a command killed by the
// signal (128+n), not as a failed task (1), after cancelling the task.
func TestInterruptedRunExitsWithTheSignal(t *testing.T) {
	_, file := packedPlainBundle(t)
	prog := Program{Name: "host"}
	logs := waitwriter.New("[task] sleeping")
	var out bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- prog.Run(context.Background(), []string{"run", "--bundle", file, "--dag", selftest.DagID, "--task", "sleep", "--conf", `{"seconds": 600}`}, &out, logs)
	}()
	select {
	case <-logs.Seen():
	case c := <-code:
		t.Fatalf("run ended (exit %d) before the task slept:\n%s", c, logs.String())
	case <-deadline.Context(t).Done():
		t.Fatalf("the task never logged that it sleeps:\n%s", logs.String())
	}
	// run catches SIGINT from here on (it registered before forking).
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if c := <-code; c != 128+int(syscall.SIGINT) {
		t.Fatalf("exit %d, want %d:\n%s\n%s", c, 128+int(syscall.SIGINT), out.String(), logs.String())
	}
	if !strings.Contains(logs.String(), "interrupted by SIGINT") || !strings.Contains(out.String(), "sleep") {
		t.Fatalf("the interruption is not reported:\n%s\n%s", out.String(), logs.String())
	}
}
