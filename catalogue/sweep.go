package catalogue

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/cli"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/supervisor"
	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/registry"
	"github.com/airflow-sandbox/airflow-go-worker/tasks"
)

// SweepCommand is `<bundle> sweep`: remove leftover sandboxes this bundle
// created that expired or whose Dag run is over, and interrupted
// transfers' leftovers in storage.
var SweepCommand = cli.Command{Name: "sweep", Usage: "[flags]", Summary: "remove leftover sandboxes", Run: sweepCommand}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func sweepCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var in tasks.SweepInput
	var connFile string
	var finished, prefixes stringList
	var asJSON bool
	var olderThan time.Duration
	var options stringList
	backends := strings.Join(registry.Default.Names(), ", ")
	fs.StringVar(&in.Backend, "backend", "", "sandbox backend: one of "+backends+" (default "+tasks.DefaultBackend+"; with --storage, only storage is swept unless --backend is given)")
	fs.StringVar(&in.ConnID, "conn-id", "", "Airflow connection of the backend (default: the backend's own, e.g. modal_default)")
	fs.Var(&options, "option", "a backend option as KEY=VALUE, e.g. app_name=etl for modal (repeatable; VALUE is read as JSON when it parses)")
	fs.BoolVar(&in.DryRun, "dry-run", false, "list what would be destroyed, destroy nothing")
	fs.StringVar(&connFile, "connections", "", "connections file (YAML/JSON, conn_id -> URI or object); AIRFLOW_CONN_* variables are read too")
	fs.Var(&finished, "finished-run", "a finished Dag run, as <dag_id>/<run_id>, whose sandboxes go even before they expire (repeatable)")
	fs.BoolVar(&asJSON, "json", false, "print the result as JSON")
	var stateDir string
	fs.StringVar(&stateDir, "state", "", "the --state directory of `run`: sandboxes whose Dag run it records as ended (success or failed) go too")
	fs.Var(&prefixes, "storage", "a URL prefix (s3://bucket/prefix, file:///dir) to clear of interrupted transfers' leftovers: temporary files, .partial objects, unfinished multipart uploads (repeatable)")
	fs.DurationVar(&olderThan, "older-than", tasks.DefaultLeftoverAge, "with --storage: how old a leftover must be to be removed")
	fs.StringVar(&in.StorageConnID, "storage-conn-id", "", "with --storage: the aws connection for s3:// prefixes (default: the AWS credential chain)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: airflow-go-worker sweep [--backend %s] [--conn-id ID] [--option KEY=VALUE ...] [--dry-run] [--connections FILE] [--finished-run DAG/RUN ...] [--state DIR]\n", strings.ReplaceAll(backends, ", ", "|"))
		fmt.Fprintln(stderr, "       airflow-go-worker sweep --storage URL_PREFIX [--older-than DURATION] [--storage-conn-id ID] [--dry-run]")
		fs.PrintDefaults()
	}
	if help, err := cli.ParseFlags(fs, args); help || err != nil {
		return err
	}
	// Checked here too, so a typo is named by its flag and fails before
	// any backend is contacted.
	for _, r := range finished {
		if err := tasks.CheckFinishedRun(r); err != nil {
			return fmt.Errorf("sweep: --finished-run %w", err)
		}
	}
	in.FinishedRuns = finished
	in.Storage, in.OlderThan = prefixes, tasks.Duration(olderThan)
	if olderThan < 0 {
		return fmt.Errorf("sweep: --older-than %v is negative; give how old a leftover must be, e.g. 24h", olderThan)
	}
	if in.Backend == "" && len(in.Storage) == 0 {
		in.Backend = tasks.DefaultBackend
	}
	if len(options) > 0 {
		if in.Backend == "" {
			return errors.New("sweep: --option sets a backend's options; give --backend too")
		}
		raw, err := optionsJSON(options)
		if err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
		in.Options = map[string]json.RawMessage{strings.ToLower(in.Backend): raw}
	}
	var af tasks.Airflow = &cliAirflow{file: connFile}
	if stateDir != "" {
		if st, err := os.Stat(stateDir); err != nil || !st.IsDir() {
			return fmt.Errorf("sweep: --state %s is not a directory (%v); give the directory `run --state` wrote", stateDir, err)
		}
		af = cliRunStates{af.(*cliAirflow), &supervisor.Supervisor{StateDir: stateDir}}
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "sweep", Output: stderr, Level: hclog.Info})
	res, err := tasks.Sweep(ctx, tasks.Deps{Airflow: af, Logger: log}, in)
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if eerr := enc.Encode(res); eerr != nil && err == nil {
			err = eerr
		}
	} else {
		printSweep(stdout, res)
	}
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	return nil
}

func printSweep(w io.Writer, res tasks.SweepResult) {
	for _, rep := range res.Storage {
		verb := "removed"
		if res.DryRun {
			verb = "would remove"
		}
		for _, l := range rep.Found {
			fmt.Fprintf(w, "%s %s\tkind=%s\tsince=%s\n", verb, l.URL, l.Kind, l.Since.Format(time.RFC3339))
		}
		fmt.Fprintf(w, "%s: %d leftovers found, %d removed\n", rep.Prefix, len(rep.Found), len(rep.Removed))
	}
	if res.Backend == "" {
		return
	}
	verb := "destroyed"
	if res.DryRun {
		verb = "would destroy"
	}
	for _, s := range res.Found {
		reason := s.Reason
		if s.RunState != "" {
			reason += " (" + s.RunState + ")"
		}
		fmt.Fprintf(w, "%s %s\towner=%s\texpires_at=%s\treason=%s\n", verb, s.ID, s.Owner, s.ExpiresAt, reason)
	}
	fmt.Fprintf(w, "%s sandboxes: %d found stale, %d destroyed, %d kept (in use, or their run's state unknown)\n", res.Backend, len(res.Found), len(res.Destroyed), res.Kept)
}

// cliAirflow answers the tasks' Airflow questions outside a task: connections
// from AIRFLOW_CONN_* and a connections file, variables from AIRFLOW_VAR_*.
// Nothing is pushed or masked: the CLI writes no XCom and prints no secrets.
type cliAirflow struct {
	file  string
	cache map[string]connections.Connection
}

func (c *cliAirflow) GetConnection(_ context.Context, id string) (connections.Connection, error) {
	if conn, ok, err := connections.FromEnv(id); err != nil {
		return conn, err
	} else if ok {
		return conn, nil
	}
	if c.file != "" {
		if c.cache == nil {
			all, err := connections.LoadFile(c.file)
			if err != nil {
				return connections.Connection{}, fmt.Errorf("connections file %s: %w", c.file, err)
			}
			c.cache = all
		}
		if conn, ok := c.cache[id]; ok {
			return conn, nil
		}
	}
	return connections.Connection{}, fmt.Errorf("connection %q (not in AIRFLOW_CONN_%s or --connections): %w", id, strings.ToUpper(id), connections.ErrNotFound)
}

func (c *cliAirflow) GetVariable(_ context.Context, key string) (string, error) {
	if v, ok := os.LookupEnv("AIRFLOW_VAR_" + strings.ToUpper(key)); ok {
		return v, nil
	}
	return "", fmt.Errorf("variable %q: set AIRFLOW_VAR_%s", key, strings.ToUpper(key))
}

func (c *cliAirflow) SetXCom(context.Context, string, any) error       { return nil }
func (c *cliAirflow) MaskSecret(context.Context, string, string) error { return nil }

// cliRunStates answers GetDagRunState from the Dag run states `run --state`
// recorded, so the sweep command removes the sandboxes of local runs that
// ended without being told their ids.
type cliRunStates struct {
	*cliAirflow
	runs *supervisor.Supervisor
}

func (c cliRunStates) GetDagRunState(_ context.Context, dagID, runID string) (string, error) {
	st, ok, err := c.runs.DagRunState(dagID, runID)
	if err == nil && !ok {
		err = fmt.Errorf("Dag run %s/%s is not recorded in %s", dagID, runID, c.runs.StateDir)
	}
	return st, err
}

// optionsJSON turns --option KEY=VALUE flags into a backend's options
// object; a VALUE that parses as JSON (a number, true, a list) is taken as
// such, anything else as a string.
func optionsJSON(flags []string) (json.RawMessage, error) {
	obj := map[string]any{}
	for _, f := range flags {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--option %q: give KEY=VALUE", f)
		}
		var val any
		if err := json.Unmarshal([]byte(v), &val); err != nil {
			val = v
		}
		obj[k] = val
	}
	return json.Marshal(obj)
}
