package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/supervisor"
	"github.com/airflow-sandbox/airflow-go-worker/connections"
)

const runUsage = `usage: airflow-go-worker run --dag D [--task T] [flags]

Runs one task of this bundle (or, without --task, every task of the Dag in
registration order, stopping at the first that does not succeed) through a
local supervisor that forks this binary and speaks Airflow's coordinator
protocol to it, as Airflow 3.3 does unless --airflow says otherwise: no stub
call arguments reach the task (tasks bind upstream values with inputs:), and
--conf sets only the inputs the bundle config allows. Connections come from
AIRFLOW_CONN_<ID> and --connections, variables from AIRFLOW_VAR_<KEY>, XComs
from --state (or memory).

Flags:
`

// runCommand implements `airflow-go-worker run`.
func runCommand(ctx context.Context, args []string, configPath string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, runUsage); fs.PrintDefaults() }
	dagID := fs.String("dag", "", "Dag id (required)")
	taskID := fs.String("task", "", "task id; omit to run the whole Dag")
	confJSON := fs.String("conf", "", "dag_run.conf as a JSON object")
	stateDir := fs.String("state", "", "directory that keeps XComs between runs (default: in memory)")
	connFile := fs.String("connections", "", "connections file (YAML or JSON, conn_id -> URI or object)")
	runID := fs.String("run-id", "", "Dag run id (default manual__<now>)")
	retry := fs.Bool("retry", false, "report failures as up_for_retry (ti_context.should_retry)")
	airflow := fs.String("airflow", bundles.DefaultAirflow, "Airflow release to behave as: 3.3 or 3.4 (refuses a bundle whose schema that release does not know)")
	argJSON := fs.String("arg-bindings", "", "Airflow 3.4 only: the stub call's arguments as a JSON list, e.g. '[{\"name\": \"sandbox\", \"kind\": \"xcom\", \"task_id\": \"provision\"}]'")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return bundles.ExitOK
		}
		return bundles.ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "airflow-go-worker run: unexpected argument %q (all options are flags; see run -h)\n", fs.Arg(0))
		return bundles.ExitUsage
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "airflow-go-worker run: "+format+"\n", a...)
		return bundles.ExitUsage
	}
	var conf map[string]any
	if *confJSON != "" {
		if err := json.Unmarshal([]byte(*confJSON), &conf); err != nil || conf == nil {
			return fail("--conf must be a JSON object, e.g. '{\"seconds\": 2}': %v", errOrNull(err))
		}
	}
	var argBindings []map[string]any
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
	b, err := newBundle(configPath)
	if err != nil {
		return fail("%v", err)
	}
	if *dagID == "" {
		return fail("--dag is required; this bundle's Dags are: %s", strings.Join(dagNames(b), ", "))
	}
	taskIDs, err := tasksToRun(b, *dagID, *taskID)
	if err != nil {
		return fail("%v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fail("finding this executable to fork it: %v", err)
	}
	var childArgs []string
	if configPath != "" {
		abs, err := filepath.Abs(configPath)
		if err != nil {
			return fail("--bundle-config: %v", err)
		}
		childArgs = []string{"--bundle-config", abs}
	}
	if *runID == "" {
		*runID = "manual__" + time.Now().UTC().Format("2006-01-02T15:04:05.000000+00:00")
	}
	sup := &supervisor.Supervisor{
		Executable:      exe,
		Args:            childArgs,
		ConnectionsFile: *connFile,
		StateDir:        *stateDir,
		Logs:            stderr,
		Airflow:         *airflow,
	}
	schema, err := sup.BundleSchema()
	if err != nil {
		return fail("%v", err)
	}
	if argBindings != nil && schema < bundles.Schema34 {
		return fail("--arg-bindings: this bundle declares supervisor schema %s (Airflow 3.3), which has no arg_bindings; pack it with --airflow 3.4 and run the packed bundle with --airflow 3.4, or bind the input with inputs: in the bundle config", schema)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	code := bundles.ExitOK
	for _, t := range taskIDs {
		res, err := sup.RunTask(ctx, supervisor.TaskRequest{DagID: *dagID, TaskID: t, RunID: *runID, Conf: conf, ArgBindings: argBindings, ShouldRetry: *retry, MaxTries: 1})
		line := fmt.Sprintf("%s.%s (run %s): %s", *dagID, t, *runID, res.State)
		if res.RetryReason != "" {
			line += " (" + res.RetryReason + ")"
		}
		if err != nil {
			line += ": " + err.Error()
		}
		fmt.Fprintln(stdout, line)
		if res.State != supervisor.StateSuccess {
			code = bundles.ExitFailure
			break
		}
		if v, ok, _ := sup.GetXCom(*dagID, *runID, t, bundles.ReturnValueKey); ok {
			data, _ := json.Marshal(v)
			fmt.Fprintf(stdout, "  return_value: %s\n", data)
		}
		if ctx.Err() != nil {
			code = bundles.ExitFailure
			break
		}
	}
	return code
}

func errOrNull(err error) error {
	if err == nil {
		return errors.New("got null")
	}
	return err
}

// tasksToRun resolves --dag/--task against the registry, so a typo fails
// with the ids that do exist instead of a "removed" task.
func tasksToRun(b *bundles.Bundle, dagID, taskID string) ([]string, error) {
	var ids []string
	for _, ref := range b.Tasks() {
		if ref.DagID == dagID {
			ids = append(ids, ref.TaskID)
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("--dag %q is not in this bundle; its Dags are: %s", dagID, strings.Join(dagNames(b), ", "))
	}
	if taskID == "" {
		return ids, nil
	}
	for _, id := range ids {
		if id == taskID {
			return []string{taskID}, nil
		}
	}
	return nil, fmt.Errorf("--task %q is not in Dag %q; its tasks are: %s", taskID, dagID, strings.Join(ids, ", "))
}

// dagNames lists the bundle's Dag ids, sorted, for errors that must say
// which --dag values exist.
func dagNames(b *bundles.Bundle) []string {
	seen := map[string]bool{}
	var names []string
	for _, ref := range b.Tasks() {
		if !seen[ref.DagID] {
			seen[ref.DagID] = true
			names = append(names, ref.DagID)
		}
	}
	sort.Strings(names)
	return names
}
