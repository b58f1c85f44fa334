package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/check"
)

const checkUsage = `usage: check --dags PATH [--dags PATH ...] [--executables-root DIR ...] [--queue Q ...] [--python PY] [--timeout 5m] [--format text|json]

Checks stub Dags against the bundles Airflow would run them with, before
they are deployed: it parses the Dags with Airflow's own parser (the python
of Airflow's environment), reads the [sdk] coordinator settings from that
Airflow's configuration (AIRFLOW_HOME, AIRFLOW__SDK__*), finds the bundles
as the ExecutableCoordinator does, and reports every
  - stub task on a Go queue that the bundle serving its Dag does not register
    (Airflow marks it removed and the Dag run can still succeed),
  - Dag with Go tasks that no bundle lists (its tasks fail with an empty log),
  - Dag two bundles list (and the one the coordinator picks),
  - stub task on a queue no coordinator serves,
  - input bound to the XCom of a task that is not upstream (inputs: {x: {xcom: t}}),
each with the file, Dag, task and the fix. It runs each bundle it uses with
"describe" to read its bindings. Exit status 1 when it finds anything, or
when it does not finish within --timeout (a Dag file that blocks at import).

flags:
`

// stringsFlag collects a repeatable flag.
type stringsFlag []string

func (s *stringsFlag) String() string { return strings.Join(*s, ", ") }

func (s *stringsFlag) Set(v string) error {
	if v == "" {
		return fmt.Errorf("empty value")
	}
	*s = append(*s, v)
	return nil
}

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() { fmt.Fprint(stderr, checkUsage); fs.SetOutput(stderr); fs.PrintDefaults() }
	var o check.Options
	fs.Var((*stringsFlag)(&o.Dags), "dags", "a Dags folder or Dag file (repeatable)")
	fs.Var((*stringsFlag)(&o.Roots), "executables-root", "a directory of bundles, or a bundle file, searched as the coordinator's executables_root (repeatable; default: each Go coordinator's executables_root in Airflow's configuration)")
	fs.Var((*stringsFlag)(&o.Queues), "queue", "a queue to treat as routed to the Go coordinator over --executables-root, whatever Airflow's [sdk] queue_to_coordinator says (repeatable; for checks outside the deployment, e.g. in CI)")
	fs.StringVar(&o.Python, "python", "", "the python of Airflow's environment (default: $"+check.PythonEnv+", then python3 on PATH)")
	fs.DurationVar(&o.Timeout, "timeout", check.DefaultTimeout, "how long the whole check may take, parsing the Dags included (0: no limit)")
	format := fs.String("format", "text", "text, or json (the whole report)")
	if help, err := ParseFlags(fs, args); help || err != nil {
		return err
	}
	if *format != "text" && *format != "json" {
		return fmt.Errorf("check: --format %q: use text or json", *format)
	}
	if o.Timeout < 0 {
		return fmt.Errorf("check: --timeout %s: give a positive duration such as 5m, or 0 for no limit", o.Timeout)
	}
	if len(o.Dags) == 0 {
		return fmt.Errorf("check: give the Dags to check with --dags (a Dags folder or a Dag file; see check -h)")
	}
	r, err := check.Run(ctx, o)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	if *format == "json" {
		out, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", out)
	} else {
		for _, f := range r.Findings {
			fmt.Fprintf(stdout, "%s\n\n", f)
		}
		for _, n := range r.Notes {
			fmt.Fprintf(stdout, "note: %s\n", n)
		}
		fmt.Fprintln(stdout, r.Summary())
	}
	if len(r.Findings) > 0 {
		return fmt.Errorf("check: %d finding(s)", len(r.Findings))
	}
	return nil
}
