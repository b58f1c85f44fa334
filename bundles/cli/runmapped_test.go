package cli

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/testing/makebuild"
)

// runTestBundle runs `run --bundle <the supervisor's test bundle>` with
// args, returning the exit code, stdout and stderr.
func runTestBundle(t *testing.T) func(args ...string) (int, string, string) {
	t.Helper()
	dir := t.TempDir()
	exe, file := filepath.Join(dir, "testbundle"), filepath.Join(dir, "test.bundle")
	if err := (makebuild.Build{Pkg: "../supervisor/internal/testbundle"}).To(exe); err != nil {
		t.Fatal(err)
	}
	if _, _, err := pack(t, "--executable", exe, "--output", file); err != nil {
		t.Fatal(err)
	}
	prog := Program{Name: "host", Bundle: func() (*bundles.Bundle, error) { return nil, errors.New("not this program's bundle") }}
	return func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := prog.Run(context.Background(), append([]string{"run", "--bundle", file}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
}

// run --map-index tries one mapped instance locally, with the element it
// takes under Airflow (its upstream's list from --state).
func TestRunMapIndexRunsOneMappedInstance(t *testing.T) {
	run := runTestBundle(t)
	state := t.TempDir()
	if code, out, errs := run("--dag", "assets", "--task", "list", "--state", state, "--run-id", "r1"); code != 0 {
		t.Fatalf("list: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs := run("--dag", "assets", "--task", "convert", "--map-index", "1", "--state", state, "--run-id", "r1")
	if code != 0 || !strings.Contains(out, "assets.convert[1] (run r1): success") || !strings.Contains(out, `"file:///converted/b.jsonl"`) {
		t.Fatalf("convert[1]: exit %d\n%q\n%s", code, out, errs)
	}
	// Without an element to take (no upstream list in this state), the
	// instance fails rather than running on nothing.
	if code, out, _ := run("--dag", "assets", "--task", "convert", "--map-index", "1", "--state", t.TempDir()); code == 0 || !strings.Contains(out, "failed") {
		t.Fatalf("convert[1] without its upstream: exit %d\n%s", code, out)
	}
	if code, _, errs := run("--dag", "assets", "--map-index", "1"); code == 0 || !strings.Contains(errs, "together with --task") {
		t.Fatalf("--map-index without --task: exit %d\n%s", code, errs)
	}
}

// A whole-Dag run follows a branch: the task it did not choose is skipped.
func TestRunFollowsABranch(t *testing.T) {
	run := runTestBundle(t)
	code, out, errs := run("--dag", "branch", "--conf", `{"way": "right"}`)
	if code != 0 || !strings.Contains(out, "branch.left (run ") || !strings.Contains(out, "skipped (by a branch)") || !strings.Contains(out, `"went right"`) || strings.Contains(out, `"went left"`) {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
}
