package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/footer"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/schema"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/supervisor"
	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/internal/exitorder"
)

const runUsage = `usage: %s run --dag D [--task T [--map-index N]] [--bundle FILE] [flags]

Runs one task of this bundle, or with --bundle of any AFBNDL01 bundle (ours
or one built with Airflow's Go SDK), or without --task every task of the
Dag in registration order, stopping at the first that does not succeed,
through a local supervisor that forks the bundle and speaks Airflow's
coordinator protocol to it, as Airflow 3.3 does unless --airflow says otherwise: no stub
call arguments reach the task (tasks bind upstream values with inputs:), and
--conf sets only the inputs the bundle config allows. Connections come from
AIRFLOW_CONN_<ID> and --connections, variables from AIRFLOW_VAR_<KEY>, XComs
and asset events from --state (or memory). A branch's unchosen tasks are
skipped in a whole-Dag run. --map-index runs one instance of a mapped task,
which takes its element as under Airflow (its upstream's list from --state,
or the bundle's literal list): run the upstream first with the same --state.

Flags:
`

// runCommand implements `<bundle> run`.
func (p Program) runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintf(stderr, runUsage, p.name()); fs.PrintDefaults() }
	var vars varFlags
	fs.Var(&vars, "var", "an Airflow variable as KEY=VALUE, served over the comm socket as Airflow serves variables from its database (repeatable)")
	bundleFile := fs.String("bundle", "", "an AFBNDL01 bundle file to run instead of this bundle (its tasks come from its manifest)")
	dagID := fs.String("dag", "", "Dag id (required)")
	taskID := fs.String("task", "", "task id; omit to run the whole Dag")
	confJSON := fs.String("conf", "", "dag_run.conf as a JSON object")
	stateDir := fs.String("state", "", "directory that keeps XComs between runs (default: in memory)")
	connFile := fs.String("connections", "", "connections file (YAML or JSON, conn_id -> URI or object)")
	runID := fs.String("run-id", "", "Dag run id (default manual__<now>)")
	retry := fs.Bool("retry", false, "report failures as up_for_retry (ti_context.should_retry)")
	airflow := fs.String("airflow", schema.DefaultAirflow, "Airflow release to behave as: 3.3 or 3.4 (refuses a bundle whose schema that release does not know)")
	var runStates runStateFlags
	fs.Var(&runStates, "dag-run-state", "answer GetDagRunState for another Dag run, as DAG_ID/RUN_ID=STATE (queued, running, success or failed; repeatable); runs this command runs are recorded in --state")
	mapIndex := fs.Int("map-index", -1, "run one mapped instance of the task: its map index (0, 1, ...), whose element the task binds from its upstream's XCom in --state or its literal list, as under Airflow")
	argJSON := fs.String("arg-bindings", "", "Airflow 3.4 only: the stub call's arguments as a JSON list, e.g. '[{\"name\": \"sandbox\", \"kind\": \"xcom\", \"task_id\": \"provision\"}]'")
	if help, err := ParseFlags(fs, args); help {
		return exitorder.OK
	} else if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", p.name(), err)
		return exitorder.Usage
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "%s run: %s\n", p.name(), fmt.Sprintf(format, a...))
		return exitorder.Usage
	}
	var conf map[string]any
	if *confJSON != "" {
		if err := json.Unmarshal([]byte(*confJSON), &conf); err != nil || conf == nil {
			return fail("--conf must be a JSON object, e.g. '{\"seconds\": 2}': %v", errOrNull(err))
		}
	}
	var argBindings []protocol.ArgBinding
	if *argJSON != "" {
		if err := json.Unmarshal([]byte(*argJSON), &argBindings); err != nil || argBindings == nil {
			return fail("--arg-bindings must be a JSON list of {name, kind, value | task_id}: %v", errOrNull(err))
		}
	}
	// Read the connections file now: a typo in its path or its YAML would
	// otherwise surface only when a task asks for a connection, or never.
	if *connFile != "" {
		if _, err := connections.LoadFile(*connFile); err != nil {
			return fail("--connections: %v", err)
		}
	}
	// Create --state now: an unusable directory would otherwise fail the
	// task only after it ran, when it pushes its result.
	if *stateDir != "" {
		if err := os.MkdirAll(*stateDir, 0o700); err != nil { // XComs are private to the worker's user
			return fail("--state: %v (give a directory you can write to)", err)
		}
	}
	exe, childArgs, dags, err := p.runTarget(*bundleFile)
	if err != nil {
		return fail("%v", err)
	}
	if *dagID == "" {
		return fail("--dag is required; this bundle's Dags are: %s", strings.Join(dags.dagNames(), ", "))
	}
	taskIDs, err := dags.resolve(*dagID, *taskID)
	if err != nil {
		return fail("%v", err)
	}
	if *mapIndex < -1 || *mapIndex >= 0 && *taskID == "" {
		return fail("--map-index %d: give a map index of 0 or more together with --task (the mapped task whose instance to run)", *mapIndex)
	}
	if *runID == "" {
		*runID = "manual__" + time.Now().UTC().Format("2006-01-02T15:04:05.000000+00:00")
	}
	sup := &supervisor.Supervisor{
		Executable:      exe,
		Args:            childArgs,
		ConnectionsFile: *connFile,
		Variables:       vars.m,
		StateDir:        *stateDir,
		DagRunStates:    runStates.m,
		Logs:            stderr,
		Airflow:         *airflow,
	}
	version, err := sup.BundleSchema()
	if err != nil {
		return fail("%v", err)
	}
	if argBindings != nil && !schema.AtLeast(version, schema.V34) {
		return fail("--arg-bindings: this bundle declares supervisor schema %s (Airflow 3.3), which has no arg_bindings; pack it with --airflow 3.4 and run the packed bundle with --airflow 3.4, or bind the input with inputs: in the bundle config", version)
	}
	ctx, interrupted, stop := cancelOnSignal(ctx)
	defer stop()

	code := exitorder.OK
	skipped := map[string]bool{} // what a branch had Airflow skip
	for _, t := range taskIDs {
		if skipped[t] {
			fmt.Fprintf(stdout, "%s.%s (run %s): skipped (by a branch)\n", *dagID, t, *runID)
			continue
		}
		res, err := sup.RunTask(ctx, supervisor.TaskRequest{DagID: *dagID, TaskID: t, RunID: *runID, Conf: conf, ArgBindings: argBindings, ShouldRetry: *retry, MaxTries: 1,
			Mapped: *mapIndex >= 0, MapIndex: *mapIndex})
		for _, s := range res.SkippedDownstream {
			skipped[s] = true
		}
		line := fmt.Sprintf("%s.%s (run %s): %s", *dagID, t, *runID, res.State)
		if *mapIndex >= 0 {
			line = fmt.Sprintf("%s.%s[%d] (run %s): %s", *dagID, t, *mapIndex, *runID, res.State)
		}
		if res.RetryReason != "" {
			line += " (" + res.RetryReason + ")"
		}
		if err != nil {
			line += ": " + err.Error()
		}
		fmt.Fprintln(stdout, line)
		if res.State != supervisor.StateSuccess {
			code = exitorder.Failure
			break
		}
		if v, ok, _ := sup.GetMappedXCom(*dagID, *runID, t, protocol.ReturnValueKey, *mapIndex); ok {
			data, _ := json.Marshal(v)
			fmt.Fprintf(stdout, "  return_value: %s\n", data)
		}
		if ctx.Err() != nil {
			code = exitorder.Failure
			break
		}
	}
	// A whole Dag run is over when its last task ran or one did not
	// succeed; a run of one task (--task) may go on with the next.
	if *taskID == "" {
		end := supervisor.DagRunSuccess
		if code != exitorder.OK {
			end = supervisor.DagRunFailed
		}
		if err := sup.SetDagRunState(*dagID, *runID, end); err != nil {
			fmt.Fprintf(stderr, "run: %v\n", err)
		}
	}
	if sig := interrupted(); sig != 0 {
		// As a shell reports a command killed by the signal, so scripts
		// tell an interrupted run from a failed task.
		fmt.Fprintf(stderr, "run: interrupted by %s; the running task was cancelled and the rest not started\n", unix.SignalName(sig))
		return 128 + int(sig)
	}
	return code
}

// cancelOnSignal cancels ctx on SIGINT or SIGTERM; interrupted tells which
// signal did it (0 while none has). Signals stay caught until stop, so a
// second Ctrl-C does not kill run while the task cleans up.
func cancelOnSignal(parent context.Context) (ctx context.Context, interrupted func() syscall.Signal, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	var got atomic.Int32
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigc:
			got.Store(int32(s.(syscall.Signal)))
			cancel()
		case <-done:
		}
	}()
	stop = func() {
		signal.Stop(sigc)
		close(done)
		cancel()
	}
	return ctx, func() syscall.Signal { return syscall.Signal(got.Load()) }, stop
}

// runTarget is what run forks: this executable (with the program's fork
// arguments) and its registered tasks, or a bundle file and the tasks its
// manifest lists.
func (p Program) runTarget(bundleFile string) (exe string, args []string, dags dagTasks, err error) {
	if bundleFile != "" {
		abs, err := filepath.Abs(bundleFile)
		if err != nil {
			return "", nil, dags, fmt.Errorf("--bundle: %w", err)
		}
		fb, err := footer.Read(abs)
		if err != nil {
			return "", nil, dags, fmt.Errorf("--bundle %s: %w", bundleFile, err)
		}
		dags = dagTasks{tasks: map[string][]string{}}
		for _, id := range fb.Manifest.DagIDs() {
			dags.order = append(dags.order, id)
			dags.tasks[id] = fb.Manifest.Dags[id].Tasks
		}
		return abs, nil, dags, nil
	}
	b, err := p.Bundle()
	if err != nil {
		return "", nil, dags, err
	}
	if exe, err = os.Executable(); err != nil {
		return "", nil, dags, fmt.Errorf("finding this executable to fork it: %w", err)
	}
	return exe, p.ForkArgs, tasksOfBundle(b), nil
}

// runStateFlags collects --dag-run-state DAG_ID/RUN_ID=STATE.
type runStateFlags struct{ m map[string]string }

func (v *runStateFlags) String() string { return "" }

func (v *runStateFlags) Set(s string) error {
	run, state, ok := strings.Cut(s, "=")
	dag, id, ok2 := strings.Cut(run, "/")
	if !ok || !ok2 || dag == "" || id == "" {
		return fmt.Errorf("give DAG_ID/RUN_ID=STATE, got %q", s)
	}
	switch state {
	case supervisor.DagRunQueued, supervisor.DagRunRunning, supervisor.DagRunSuccess, supervisor.DagRunFailed:
	default:
		return fmt.Errorf("state %q of %s is not one of queued, running, success, failed", state, run)
	}
	if v.m == nil {
		v.m = map[string]string{}
	}
	v.m[run] = state
	return nil
}

// varFlags collects --var KEY=VALUE.
type varFlags struct{ m map[string]string }

func (v *varFlags) String() string { return "" }

func (v *varFlags) Set(s string) error {
	k, val, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("give KEY=VALUE, got %q", s)
	}
	if v.m == nil {
		v.m = map[string]string{}
	}
	v.m[k] = val
	return nil
}
