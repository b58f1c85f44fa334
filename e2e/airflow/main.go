// Command airflow-e2e runs the examples on a real Airflow 3.3 scheduler:
// it starts Airflow (scheduler, dag-processor and api-server with
// LocalExecutor over SQLite) from the pinned venv on 127.0.0.1, with our
// packed bundles in the ExecutableCoordinator's executables_root, the
// examples' stub Dags in the Dags folder, versitygw for S3, the fake
// Modal server (testing/fakemodal) for the examples' sandboxes and a
// scripted OpenAI-compatible model server for agent_handoff's agent
// (llmserver.go), triggers each Dag with no conf (they run on backend:
// modal, as shipped; agent_handoff twice, the second time with the model
// down), waits for it and checks the results through Airflow's REST API,
// the S3 server and the fakes. stub_semantics (semantics.go) runs Go stubs
// beside their Python @task twins and holds each pair to the same end;
// stub_refused (refused.go, e2e/airflow/testdata) is what `check` refuses,
// run anyway. `make airflow-e2e` (scripts/airflow-e2e.sh)
// builds what it needs and runs it:
//
//	airflow-e2e -venv .venv -worker bin/airflow-go-worker -go-tasks bin/go_tasks
//
// It prints one line per Dag run, DAG_ID RUN_ID STATE, stops everything it
// started, and exits 0 only if every run ended as its scenario expects
// (success, but failed for the model-down run and the twins' runs, where
// tasks fail on purpose) and every check passed.
//
// With -executor celery (make airflow-e2e EXECUTOR=celery) it runs the
// sandbox examples on CeleryExecutor instead, two workers as separate hosts,
// then strikes three faults (celery.go, docs/deploying.md); with -executor
// edge on EdgeExecutor, two edge workers reaching only the api-server, then
// one worker killed mid-task (edge.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

type options struct {
	repo       string        // repository root: examples/ and the Dag files
	venv       string        // the venv whose bin/airflow runs the deployment
	workerBin  string        // airflow-go-worker, built from this checkout
	goTasksBin string        // the examples/go_tasks bundle's executable
	keep       bool          // keep the work directory even after a success
	runTimeout time.Duration // how long all Dag runs together may take
	bootWait   time.Duration // bound on each start-up phase of Airflow

	executor   string // local (LocalExecutor, SQLite), celery (celery.go) or edge (edge.go)
	celeryRuns int    // runs of each example in the Celery clean batch
	edgeRuns   int    // runs of each example in the Edge clean batch
	pgBin      string // PostgreSQL's bin directory ("" = the newest Debian one)
	netnsDir   string // set by a distributed run's first part for its second
}

func main() {
	var o options
	flag.StringVar(&o.repo, "repo", ".", "repository root (holds examples/)")
	flag.StringVar(&o.venv, "venv", ".venv", "the Python venv with the pinned Airflow (scripts/ensure-venv.sh makes it)")
	flag.StringVar(&o.workerBin, "worker", "bin/airflow-go-worker", "the airflow-go-worker binary")
	flag.StringVar(&o.goTasksBin, "go-tasks", "bin/go_tasks", "the examples/go_tasks binary")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (Airflow home, logs, S3 data) after a success too")
	flag.DurationVar(&o.runTimeout, "run-timeout", 12*time.Minute, "how long the Dag runs may take, all together")
	flag.DurationVar(&o.bootWait, "boot-timeout", 4*time.Minute, "bound on each Airflow start-up phase (migrate, components healthy, Dags parsed)")
	only := flag.String("dags", "", "comma-separated Dag ids to run (default: all of "+strings.Join(dagIDs(), ", ")+"; LocalExecutor only)")
	flag.StringVar(&o.executor, "executor", "local", "local: LocalExecutor on SQLite; celery: CeleryExecutor on PostgreSQL and Redis, two workers as separate hosts, then faults; edge: EdgeExecutor on PostgreSQL, two edge workers as separate hosts, then one killed (celery and edge need root)")
	flag.IntVar(&o.celeryRuns, "celery-runs", 10, "EXECUTOR=celery: runs of each example in the clean batch")
	flag.IntVar(&o.edgeRuns, "edge-runs", 5, "EXECUTOR=edge: runs of each example in the clean batch")
	flag.StringVar(&o.pgBin, "pg-bin", "", "EXECUTOR=celery or edge: PostgreSQL's bin directory (default: the newest /usr/lib/postgresql/*/bin)")
	flag.StringVar(&o.netnsDir, "netns", "", "internal: the directory describing the network namespaces, for the Celery or Edge run's part inside them")
	flag.Parse()
	if o.executor != "local" && o.executor != "celery" && o.executor != "edge" {
		fatal(fmt.Errorf("-executor %q: want local, celery or edge", o.executor))
	}
	if o.executor != "local" && *only != "" {
		fatal(fmt.Errorf("-dags applies to the LocalExecutor run only; EXECUTOR=%s runs sandbox_conversion, sandbox_pipeline and the maintenance Dag", o.executor))
	}
	if err := selectScenarios(*only); err != nil {
		fatal(err)
	}
	for _, p := range []*string{&o.repo, &o.venv, &o.workerBin, &o.goTasksBin} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			fatal(err)
		}
		*p = abs
	}

	// Ctrl-C and SIGTERM cancel every wait; the deferred stops then run
	// before the process exits, so nothing is left behind.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch o.executor {
	case "celery":
		err = runCelery(ctx, o)
	case "edge":
		err = runEdge(ctx, o)
	default:
		err = run(ctx, o)
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "\nairflow-e2e: interrupted; everything it started is stopped")
		os.Exit(130)
	}
	var status exitStatus
	if errors.As(err, &status) {
		os.Exit(int(status)) // the distributed run's second part said why
	}
	if err != nil {
		fatal(err)
	}
}

// printSummary prints one line per Dag run: DAG_ID RUN_ID STATE.
func printSummary(runs []*dagRun) {
	fmt.Println()
	for _, r := range runs {
		fmt.Println(r.summaryLine())
	}
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "\nairflow-e2e FAILED: %v\n", err)
	os.Exit(1)
}

func step(format string, a ...any) {
	fmt.Printf("\n==> [%s] "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
}

func info(format string, a ...any) { fmt.Printf("    "+format+"\n", a...) }

// run is the LocalExecutor mode: everything up, every scenario's run,
// their checks, then everything down again.
func run(ctx context.Context, o options) (err error) {
	started := time.Now()
	w, err := newWorkdir()
	if err != nil {
		return err
	}
	defer keepOrRemove(ctx, o, w, &err)
	info("work directory %s", w.root)

	var stops stopList
	// Stopped in reverse order of their starts; a stop's error (a fake
	// that saw an RPC it does not serve, a sandbox left) fails the run.
	defer func() {
		if stopErr := stops.stop(); err == nil {
			err = stopErr
		}
	}()
	env, err := startLocal(ctx, o, w, &stops)
	if err != nil {
		return err
	}
	if err := waitParsed(ctx, env, scenarios); err != nil {
		return err
	}
	runs, err := runAll(ctx, env, scenarios, o.runTimeout, env.alive)
	if err != nil {
		printSummary(runs)
		return err
	}
	failed := checkRuns(ctx, env, runs)
	left := leftBehind(env)
	printSummary(runs)
	fmt.Printf("\n%d Dag runs, %d failed, %s in all\n", len(runs), failed, time.Since(started).Round(time.Second))
	if failed > 0 {
		return errors.New("not every Dag run ended as expected and passed its checks; see the task logs and failed checks above")
	}
	if len(left) > 0 {
		return fmt.Errorf("%d sandboxes were left behind", len(left))
	}
	return nil
}

// keepOrRemove removes the work directory after a success; a failed or
// interrupted run keeps its logs for whoever has to find out why.
func keepOrRemove(ctx context.Context, o options, w *workdir, err *error) {
	if *err != nil || o.keep || ctx.Err() != nil {
		fmt.Printf("\nwork directory kept: %s (Airflow home, component and task logs, S3 data)\n", w.root)
		return
	}
	if rmErr := os.RemoveAll(w.root); rmErr != nil {
		fmt.Fprintf(os.Stderr, "could not remove the work directory %s: %v\n", w.root, rmErr)
	}
}

// stopList stops what was started, last first.
type stopList []func() error

func (l *stopList) add(stop func() error) { *l = append(*l, stop) }

// stop runs every stop, newest first, and returns the first error.
func (l stopList) stop() error {
	var first error
	for i := len(l) - 1; i >= 0; i-- {
		if err := l[i](); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// startLocal packs the bundles and starts the S3 server, the fake Modal
// server, the scripted model and Airflow, each added to stops as soon as
// it runs.
func startLocal(ctx context.Context, o options, w *workdir, stops *stopList) (*checkEnv, error) {
	step("packing the bundles into %s", w.executables)
	if err := packBundles(ctx, o, w); err != nil {
		return nil, err
	}

	step("starting versitygw (S3) over %s", w.s3)
	store, err := startStore(ctx, o, w, "127.0.0.1")
	if err != nil {
		return nil, err
	}
	stops.add(func() error { store.stop(); return nil })
	info("endpoint %s, bucket %s, input s3://%s/%s", store.srv.Endpoint, bucket, bucket, inputKey)

	step("starting the fake Modal server (testing/fakemodal) on 127.0.0.1")
	modal, err := startModal(w, "127.0.0.1")
	if err != nil {
		return nil, err
	}
	// Stopped after Airflow, destroying whatever sandbox is left; an RPC
	// it could not serve fails the run.
	stops.add(modal.stop)
	info("%s (token via connection %s), sandboxes in %s", modal.srv.URL(), modalConnID, w.modal)

	step("starting the scripted model server (OpenAI chat completions) on 127.0.0.1")
	llm, err := startLLM(agentModel, agentRun)
	if err != nil {
		return nil, err
	}
	stops.add(llm.stop)
	info("%s, model %s (connection %s)", llm.url, agentModel, llmConnID)

	step("starting Airflow from %s on 127.0.0.1", o.venv)
	af, err := startAirflow(ctx, o, w, store, modal, llm)
	if af != nil {
		stops.add(func() error { af.stop(); return nil })
	}
	if err != nil {
		return nil, err
	}
	return &checkEnv{api: af.api, store: store, modal: modal, llm: llm, w: w, o: o, af: af}, nil
}

// waitParsed waits until the dag-processor has parsed every scenario's Dag.
func waitParsed(ctx context.Context, e *checkEnv, list []*scenario) error {
	step("waiting for the Dags to be parsed")
	for _, s := range list {
		if err := e.api.waitDag(ctx, s.dagID, e.o.bootWait, e.alive); err != nil {
			return err
		}
		info("%s parsed", s.dagID)
	}
	return nil
}

// checkRuns checks each run's end state and its scenario's checks, and
// says how many failed.
func checkRuns(ctx context.Context, e *checkEnv, runs []*dagRun) (failed int) {
	step("checking the results through the REST API, the S3 server and the fake servers")
	for _, r := range runs {
		// A run meant to fail (the model down) explains itself in its
		// checks; its task logs are printed only when one fails.
		want := r.scenario.want()
		if want == "success" {
			e.api.printFailedTasks(ctx, r)
		}
		if r.state != want {
			if want != "success" {
				e.api.printFailedTasks(ctx, r)
				fmt.Printf("    %s: run %s is %s, want %s\n", r.scenario.dagID, r.runID, r.state, want)
			}
			failed++
			continue
		}
		problems := r.scenario.check(ctx, e, r)
		if len(problems) > 0 && want != "success" {
			e.api.printFailedTasks(ctx, r)
		}
		for _, p := range problems {
			fmt.Printf("    %s: check failed: %v\n", r.scenario.dagID, p)
		}
		if len(problems) == 0 {
			info("%s: %s", r.scenario.dagID, r.scenario.proves)
		} else {
			failed++
		}
	}
	return failed
}

// leftBehind lists the sandboxes still there: every example destroys its
// sandboxes, also when a task failed, and none ran on the worker's own
// local backend.
func leftBehind(e *checkEnv) []string {
	left := e.modal.live()
	if len(left) > 0 {
		fmt.Printf("    sandboxes the fake Modal server still runs: %s\n", strings.Join(left, ", "))
	}
	if local := sandboxesLeft(e.w); len(local) > 0 {
		fmt.Printf("    local sandboxes on the worker itself, in %s: %s\n", e.w.sandboxRoot(), strings.Join(local, ", "))
		left = append(left, local...)
	}
	return left
}
