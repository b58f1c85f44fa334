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

// runCommand implements `<bundle> run`: read the flags, check what they
// name before anything runs, build the local supervisor, run the task (or
// the Dag's tasks in order), and record a whole Dag run's end.
func (p Program) runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, exit, ok := p.parseRunFlags(args, stderr)
	if !ok {
		return exit
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "%s run: %v\n", p.name(), err)
		return exitorder.Usage
	}
	in, err := f.inputs()
	if err != nil {
		return fail(err)
	}
	sup, taskIDs, err := p.runPlan(f, in, stderr)
	if err != nil {
		return fail(err)
	}
	ctx, interrupted, stop := cancelOnSignal(ctx)
	defer stop()
	code := runTasks(ctx, sup, f, in, taskIDs, stdout)
	// A whole Dag run is over when its last task ran or one did not
	// succeed; a run of one task (--task) may go on with the next.
	if f.taskID == "" {
		end := supervisor.DagRunSuccess
		if code != exitorder.OK {
			end = supervisor.DagRunFailed
		}
		if err := sup.SetDagRunState(f.dagID, f.runID, end); err != nil {
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

// runFlags are run's command line.
type runFlags struct {
	vars                                varFlags
	runStates                           runStateFlags
	bundleFile, dagID, taskID, confJSON string
	stateDir, connFile, runID, airflow  string
	argJSON                             string
	mapIndex                            int
	retry                               bool
	deferWait                           time.Duration
}

// parseRunFlags reads run's flags; when it returns !ok, run exits with
// exit (0 after --help).
func (p Program) parseRunFlags(args []string, stderr io.Writer) (f *runFlags, exit int, ok bool) {
	f = &runFlags{}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintf(stderr, runUsage, p.name()); fs.PrintDefaults() }
	fs.Var(&f.vars, "var", "an Airflow variable as KEY=VALUE, served over the comm socket as Airflow serves variables from its database (repeatable)")
	fs.StringVar(&f.bundleFile, "bundle", "", "an AFBNDL01 bundle file to run instead of this bundle (its tasks come from its manifest)")
	fs.StringVar(&f.dagID, "dag", "", "Dag id (required)")
	fs.StringVar(&f.taskID, "task", "", "task id; omit to run the whole Dag")
	fs.StringVar(&f.confJSON, "conf", "", "dag_run.conf as a JSON object")
	fs.StringVar(&f.stateDir, "state", "", "directory that keeps XComs between runs (default: in memory)")
	fs.StringVar(&f.connFile, "connections", "", "connections file (YAML or JSON, conn_id -> URI or object)")
	fs.StringVar(&f.runID, "run-id", "", "Dag run id (default manual__<now>)")
	fs.BoolVar(&f.retry, "retry", false, "report failures as up_for_retry (ti_context.should_retry)")
	fs.StringVar(&f.airflow, "airflow", schema.DefaultAirflow, "Airflow release to behave as: 3.3 or 3.4 (refuses a bundle whose schema that release does not know)")
	fs.Var(&f.runStates, "dag-run-state", "answer GetDagRunState for another Dag run, as DAG_ID/RUN_ID=STATE (queued, running, success or failed; repeatable); runs this command runs are recorded in --state")
	fs.IntVar(&f.mapIndex, "map-index", -1, "run one mapped instance of the task: its map index (0, 1, ...), whose element the task binds from its upstream's XCom in --state or its literal list, as under Airflow")
	fs.DurationVar(&f.deferWait, "defer-wait", 5*time.Minute, "how long to wait at most for a deferred task's trigger before resuming it (0: resume at once)")
	fs.StringVar(&f.argJSON, "arg-bindings", "", "Airflow 3.4 only: the stub call's arguments as a JSON list, e.g. '[{\"name\": \"sandbox\", \"kind\": \"xcom\", \"task_id\": \"provision\"}]'")
	if help, err := ParseFlags(fs, args); help {
		return nil, exitorder.OK, false
	} else if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", p.name(), err)
		return nil, exitorder.Usage, false
	}
	return f, 0, true
}

// runInputs are what run hands every task it runs.
type runInputs struct {
	conf        map[string]any
	argBindings []protocol.ArgBinding
}

// inputs parses --conf and --arg-bindings and checks --connections and
// --state now: a typo in a path or its YAML, or a directory run cannot
// write, would otherwise surface only when a task asks for a connection or
// pushes its result, or never.
func (f *runFlags) inputs() (runInputs, error) {
	var in runInputs
	if f.confJSON != "" {
		if err := json.Unmarshal([]byte(f.confJSON), &in.conf); err != nil || in.conf == nil {
			return in, fmt.Errorf("--conf must be a JSON object, e.g. '{\"seconds\": 2}': %v", errOrNull(err))
		}
	}
	if f.argJSON != "" {
		if err := json.Unmarshal([]byte(f.argJSON), &in.argBindings); err != nil || in.argBindings == nil {
			return in, fmt.Errorf("--arg-bindings must be a JSON list of {name, kind, value | task_id}: %v", errOrNull(err))
		}
	}
	if f.connFile != "" {
		if _, err := connections.LoadFile(f.connFile); err != nil {
			return in, fmt.Errorf("--connections: %v", err)
		}
	}
	if f.stateDir != "" {
		if err := os.MkdirAll(f.stateDir, 0o700); err != nil { // XComs are private to the worker's user
			return in, fmt.Errorf("--state: %v (give a directory you can write to)", err)
		}
	}
	return in, nil
}

// runPlan finds what run forks and the tasks to run, and builds the
// supervisor, refusing arg bindings a 3.3 bundle could not receive.
func (p Program) runPlan(f *runFlags, in runInputs, logs io.Writer) (*supervisor.Supervisor, []string, error) {
	exe, childArgs, dags, err := p.runTarget(f.bundleFile)
	if err != nil {
		return nil, nil, err
	}
	if f.dagID == "" {
		return nil, nil, fmt.Errorf("--dag is required; this bundle's Dags are: %s", strings.Join(dags.dagNames(), ", "))
	}
	taskIDs, err := dags.resolve(f.dagID, f.taskID)
	if err != nil {
		return nil, nil, err
	}
	if f.mapIndex < -1 || f.mapIndex >= 0 && f.taskID == "" {
		return nil, nil, fmt.Errorf("--map-index %d: give a map index of 0 or more together with --task (the mapped task whose instance to run)", f.mapIndex)
	}
	if f.runID == "" {
		f.runID = "manual__" + time.Now().UTC().Format("2006-01-02T15:04:05.000000+00:00")
	}
	sup := &supervisor.Supervisor{
		Executable:      exe,
		Args:            childArgs,
		ConnectionsFile: f.connFile,
		Variables:       f.vars.m,
		StateDir:        f.stateDir,
		DagRunStates:    f.runStates.m,
		Logs:            logs,
		Airflow:         f.airflow,
	}
	version, err := sup.BundleSchema()
	if err != nil {
		return nil, nil, err
	}
	if in.argBindings != nil && !schema.AtLeast(version, schema.V34) {
		return nil, nil, fmt.Errorf("--arg-bindings: this bundle declares supervisor schema %s (Airflow 3.3), which has no arg_bindings; pack it with --airflow 3.4 and run the packed bundle with --airflow 3.4, or bind the input with inputs: in the bundle config", version)
	}
	return sup, taskIDs, nil
}

// runTasks runs the tasks in order, printing each outcome and return
// value, skipping what a branch had Airflow skip, and stops at the first
// that does not succeed or when ctx ends.
func runTasks(ctx context.Context, sup *supervisor.Supervisor, f *runFlags, in runInputs, taskIDs []string, stdout io.Writer) int {
	skipped := map[string]bool{}
	for _, t := range taskIDs {
		if skipped[t] {
			fmt.Fprintf(stdout, "%s.%s (run %s): skipped (by a branch)\n", f.dagID, t, f.runID)
			continue
		}
		res, deferrals, err := sup.RunDeferrable(ctx, supervisor.TaskRequest{DagID: f.dagID, TaskID: t, RunID: f.runID, Conf: in.conf, ArgBindings: in.argBindings, ShouldRetry: f.retry, MaxTries: 1,
			Mapped: f.mapIndex >= 0, MapIndex: f.mapIndex}, f.deferWait)
		for _, s := range res.SkippedDownstream {
			skipped[s] = true
		}
		fmt.Fprintln(stdout, f.outcomeLine(t, res, err))
		if deferrals > 0 {
			fmt.Fprintf(stdout, "  deferrals: %d\n", deferrals)
		}
		if res.State != supervisor.StateSuccess {
			return exitorder.Failure
		}
		if v, ok, _ := sup.GetMappedXCom(f.dagID, f.runID, t, protocol.ReturnValueKey, f.mapIndex); ok {
			data, _ := json.Marshal(v)
			fmt.Fprintf(stdout, "  return_value: %s\n", data)
		}
		if ctx.Err() != nil {
			return exitorder.Failure
		}
	}
	return exitorder.OK
}

// outcomeLine is what run prints for a task it ran:
// dag.task[map index] (run id): state (retry reason): error.
func (f *runFlags) outcomeLine(taskID string, res supervisor.Result, err error) string {
	line := fmt.Sprintf("%s.%s (run %s): %s", f.dagID, taskID, f.runID, res.State)
	if f.mapIndex >= 0 {
		line = fmt.Sprintf("%s.%s[%d] (run %s): %s", f.dagID, taskID, f.mapIndex, f.runID, res.State)
	}
	if res.RetryReason != "" {
		line += " (" + res.RetryReason + ")"
	}
	if err != nil {
		line += ": " + err.Error()
	}
	return line
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
