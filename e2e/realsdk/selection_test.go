package realsdk_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// How Airflow 3.3's coordinator picks a bundle, and what it refuses: our
// inspect must refuse the same bundles for the same reason.
func TestBundleSelectionUnderAirflow33(t *testing.T) {
	two := t.TempDir() // two bundles in one root
	pack(t, two, "a.bundle", bundleA)
	pack(t, two, "b.bundle", bundleB)
	for34 := t.TempDir() // a bundle packed for Airflow 3.4
	bundle34 := pack(t, for34, "for-3.4.bundle", workerBin, "--airflow", "3.4")
	notExec := t.TempDir() // a valid bundle without x bits
	plain := pack(t, notExec, "plain.bundle", workerBin)
	if err := os.Chmod(plain, 0o644); err != nil {
		t.Fatal(err)
	}
	c := func(name string, roots []string, dag, task string) tcase {
		return tcase{Name: name, Roots: roots, DagID: dag, TaskID: task, MaxTries: 1}
	}
	res := runCases(t, []tcase{
		c("only_a", []string{two}, "only_a", "which"),
		c("only_b", []string{two}, "only_b", "which"),
		c("shared_a_task", []string{two}, "shared", "a_task"),
		c("shared_b_task", []string{two}, "shared", "b_task"),
		c("schema_3.4", []string{for34}, selftestDag, "ping"),
		c("not_executable", []string{notExec}, selftestDag, "ping"),
		c("unknown_dag", []string{two}, "no_such_dag", "t"),
	})

	t.Run("each bundle runs its own Dag", func(t *testing.T) {
		for _, v := range []string{"a", "b"} {
			r := res["only_"+v]
			r.ranClean(t)
			r.onlyState(t, "success")
			if got := r.xcomPosts()["which/return_value"]; got != v {
				t.Fatalf("Dag only_%s ran in bundle %v", v, got)
			}
		}
	})
	t.Run("a Dag in two bundles: the first one found runs every task", func(t *testing.T) {
		// 3.3 matches on dag_id only: both tasks go to whichever bundle the
		// directory walk finds first, and the other bundle's task is
		// reported removed by ours.
		a, b := res["shared_a_task"], res["shared_b_task"]
		a.ranClean(t)
		b.ranClean(t)
		if a.FinalState == b.FinalState {
			t.Fatalf("one task must succeed and the other be removed, got %s and %s", a.FinalState, b.FinalState)
		}
		ran, gone := a, b
		if a.FinalState != "success" {
			ran, gone = b, a
		}
		ran.onlyState(t, "success")
		gone.onlyState(t, "removed")
		if !gone.logged("task is not registered in this bundle") {
			t.Errorf("the removed task's log does not say why: %v", gone.Logs)
		}
	})
	t.Run("a bundle declaring a schema 3.3 does not know", func(t *testing.T) {
		r := res["schema_3.4"]
		const reason = "Version '2026-10-30' not found in supervisor schema bundle"
		if r.ErrorType != "FileNotFoundError" || !strings.Contains(r.Error, "cannot find executable bundle with usable supervisor_schema_version") || !strings.Contains(r.Error, reason) {
			t.Fatalf("Airflow 3.3 must reject it: %s: %s", r.ErrorType, r.Error)
		}
		if len(r.APICalls) != 0 {
			t.Errorf("nothing may reach the API for a rejected bundle: %v", r.APICalls)
		}
		out, err := exec.Command(workerBin, "inspect", bundle34).CombinedOutput()
		if err == nil || !strings.Contains(string(out), reason) {
			t.Fatalf("inspect must refuse it with Airflow's reason %q: %v\n%s", reason, err, out)
		}
		if out, err := exec.Command(workerBin, "inspect", "--airflow", "3.4", bundle34).CombinedOutput(); err != nil {
			t.Fatalf("inspect --airflow 3.4 must accept it: %v\n%s", err, out)
		}
	})
	t.Run("a bundle the worker cannot execute", func(t *testing.T) {
		r := res["not_executable"]
		if r.ErrorType != "FileNotFoundError" || !strings.Contains(r.Error, "cannot find executable bundle containing dag_id='"+selftestDag+"'") {
			t.Fatalf("Airflow 3.3 must skip it: %s: %s", r.ErrorType, r.Error)
		}
		out, err := exec.Command(workerBin, "inspect", plain).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "not executable") || !strings.Contains(string(out), "cannot find executable bundle containing dag_id=") {
			t.Fatalf("inspect must refuse it and say what Airflow will report: %v\n%s", err, out)
		}
	})
	t.Run("a Dag no bundle lists", func(t *testing.T) {
		r := res["unknown_dag"]
		if r.ErrorType != "FileNotFoundError" || !strings.Contains(r.Error, "no_such_dag") {
			t.Fatalf("%s: %s", r.ErrorType, r.Error)
		}
	})
}

// Input bindings and the conf trust rule under Airflow 3.3's supervisor,
// which sends no arg_bindings: the XCom binding reads the upstream value
// with GetXCom, and a conf key naming a disallowed input fails the task
// before anything runs.
func TestBindingsUnderAirflow33(t *testing.T) {
	root := t.TempDir()
	pack(t, root, "a.bundle", bundleA)
	c := func(name string, conf map[string]any) tcase {
		return tcase{Name: name, Roots: []string{root}, DagID: "bindings", TaskID: "add", MaxTries: 1,
			Conf: conf, XComs: map[string]any{"up/return_value": 41}}
	}
	missing := c("no_upstream", nil)
	missing.XComs = nil
	res := runCases(t, []tcase{c("xcom", nil), c("allowed_conf", map[string]any{"add": 2}), c("refused_conf", map[string]any{"value": 1000}), missing})

	r := res["xcom"]
	r.ranClean(t)
	r.onlyState(t, "success")
	if got := r.xcomPosts()["add/return_value"]; got != float64(42) {
		t.Fatalf("add returned %v, want 41 (upstream XCom) + 1 (default)", got)
	}
	// The inputs are resolved, then shown as rendered fields (PUT .../rtif),
	// as Python's task runner sends its rendered templates before execute.
	if got := strings.Join(r.requestTypes(), ","); got != "GetXCom,SetRenderedFields,SetXCom,SucceedTask" {
		t.Fatalf("requests %s", got)
	}
	rf := r.renderedFields(t)
	src, _ := rf["_sources"].(map[string]any)
	if rf["value"] != float64(41) || rf["add"] != float64(1) || src["add"] != "bundle defaults" {
		t.Fatalf("rendered fields %v, want value 41 (from XCom up), add 1 (bundle defaults)", rf)
	}

	r = res["allowed_conf"]
	r.ranClean(t)
	if got := r.xcomPosts()["add/return_value"]; got != float64(43) {
		t.Fatalf("an allowed conf key: add returned %v, want 43", got)
	}

	r = res["refused_conf"]
	r.ranClean(t)
	r.onlyState(t, "failed")
	if got := strings.Join(r.requestTypes(), ","); got != "TaskState" {
		t.Fatalf("a refused conf must fail before anything is read: requests %s", got)
	}
	if !r.logged(`dag_run.conf key "value" names an input of task bindings.add`) || !r.logged("conf: [value]") {
		t.Fatalf("the task log must name the key and how to allow it: %v", r.Logs)
	}

	r = res["no_upstream"]
	r.ranClean(t)
	r.onlyState(t, "failed")
	if !r.logged(`input "value" is bound to {xcom: up}, but task "up" pushed no return_value XCom in this run`) {
		t.Fatalf("a missing upstream XCom (Airflow answers value null) must be named: %v", r.Logs)
	}
}
