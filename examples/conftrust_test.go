package examples_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"github.com/airflow-sandbox/airflow-go-worker/catalogue"
	_ "github.com/airflow-sandbox/airflow-go-worker/sandbox/local" // the backends the examples name
	_ "github.com/airflow-sandbox/airflow-go-worker/sandbox/modal"
	_ "github.com/airflow-sandbox/airflow-go-worker/storage/s3" // the store their URLs name, as the standard bundle's s3 extra
)

// asStandardBundleEnv makes this test binary the standard bundle
// (catalogue.Run, all cmd/airflow-go-worker's main does), so the shipped
// bundle configs run through the real `run` path, whose supervisor forks
// the bundle and speaks Airflow's protocol to it, without a separate build.
// init runs before TestMain, and `run` forking itself inherits the variable.
const asStandardBundleEnv = "EXAMPLES_TEST_AS_STANDARD_BUNDLE"

func init() {
	if os.Getenv(asStandardBundleEnv) == "1" {
		os.Exit(catalogue.Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
}

// confFor is a dag_run.conf that points key at the worker itself.
func confFor(key string) string {
	if key == "backends" {
		return `{"backends": [{"backend": "local"}]}`
	}
	return `{"` + key + `": "local"}`
}

// The trust rule on the shipped examples: whoever triggers a run is less
// trusted than the Dag author, so dag_run.conf sets nothing the example
// does not allow. {"backend": "local"} would move a Modal sandbox, with the
// author's stage_in, env and commands, onto the worker itself. Every
// shipped task that has a backend input must refuse it before doing
// anything: no connection read, no sandbox made, no XCom written. (The
// examples allowed it until the real-scheduler e2e ran them on Modal.)
func TestShippedExamplesRefuseBackendFromConf(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		dagID, taskID string
		// key is the conf key that would move the sandboxes: backend,
		// or the maintenance Dag's backends.
		key  string
		exe  string   // the bundle
		args []string // its run command, before --dag
		env  []string
	}
	var targets []target
	configs, _ := filepath.Glob("*/bundle.yaml")
	if len(configs) != 7 {
		t.Fatalf("want the seven shipped bundle configs, found %v", configs)
	}
	for _, cfg := range configs {
		abs, _ := filepath.Abs(cfg)
		g := readBundleConfig(t, cfg)
		for dagID, tasks := range g.tasks {
			for _, task := range tasks {
				key := "backend"
				switch {
				case dagID == catalogue.SweepDagID:
					key = "backends"
				case g.kind[task] == "list":
					key = "prefix" // a list task opens no sandbox: what it may read is its prefix
				}
				targets = append(targets, target{dagID, task, key,
					self, []string{"--bundle-config", abs, "run"}, []string{asStandardBundleEnv + "=1"}})
			}
		}
	}
	// go_tasks' own tasks with a backend input (fetch_orders and
	// publish_ranking have none, so a backend key is not theirs to refuse).
	goTasks := buildGoExample(t, "go_tasks")
	for _, task := range []string{"rank_customers", "cleanup"} {
		targets = append(targets, target{"go_tasks_example", task, "backend", goTasks, []string{"run"}, nil})
	}

	for _, tg := range targets {
		t.Run(tg.dagID+"."+tg.taskID, func(t *testing.T) {
			state, xdg := t.TempDir(), t.TempDir()
			ctx := deadline.Context(t)
			args := append(append([]string(nil), tg.args...), "--dag", tg.dagID, "--task", tg.taskID,
				"--conf", confFor(tg.key), "--run-id", "manual__conf_trust", "--state", state)
			cmd := exec.CommandContext(ctx, tg.exe, args...)
			// No connections at all: a task that got past the refusal would
			// ask for one (and say so); local sandboxes would land in xdg.
			var env []string
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "AIRFLOW_CONN_") && !strings.HasPrefix(kv, "MODAL_") {
					env = append(env, kv)
				}
			}
			cmd.Env = append(append(env, tg.env...), "XDG_STATE_HOME="+xdg, "AIRFLOW_GO_WORKER_FILE_ROOTS=")
			out, err := cmd.CombinedOutput()
			text := strings.ReplaceAll(string(out), `\"`, `"`) // the task log quotes its error
			if err == nil {
				t.Fatalf("the run succeeded with %s in dag_run.conf:\n%s", confFor(tg.key), text)
			}
			if !strings.Contains(text, tg.dagID+"."+tg.taskID+" (run manual__conf_trust): failed") {
				t.Errorf("want the task failed, got:\n%s", text)
			}
			// The fix it names: conf: under the task's dags: entry, or for
			// the maintenance Dag, which has none, its sweep: section.
			fix := "conf: [" + tg.key + "] under dags." + tg.dagID + ".tasks." + tg.taskID
			if tg.dagID == catalogue.SweepDagID {
				fix = "in the bundle config's sweep: section"
			}
			for _, want := range []string{
				`dag_run.conf key "` + tg.key + `" names an input of task ` + tg.dagID + "." + tg.taskID + " that a Dag run may not set",
				fix,
			} {
				if !strings.Contains(text, want) {
					t.Errorf("the refusal must say %q; got:\n%s", want, text)
				}
			}
			if tg.dagID == catalogue.SweepDagID && strings.Contains(text, "under dags.") {
				t.Errorf("the maintenance Dag's refusal points at a dags: entry it cannot have:\n%s", text)
			}
			// The task's log holds the refusal and nothing before it.
			for _, line := range strings.Split(text, "\n") {
				if strings.Contains(line, "[task]") && !strings.Contains(line, "task failed") {
					t.Errorf("the task logged %q before refusing the conf", line)
				}
			}
			if entries, _ := os.ReadDir(xdg); len(entries) > 0 {
				t.Errorf("the refused run left files in XDG_STATE_HOME (a local sandbox root?): %v", entries)
			}
			if xcoms, _ := filepath.Glob(filepath.Join(state, "xcom", "*")); len(xcoms) > 0 {
				t.Errorf("the refused run wrote XComs: %v", xcoms)
			}
		})
	}
}
