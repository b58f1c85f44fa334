package bundles

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/exitorder"
)

// Main serves Airflow and nothing else: --comm/--logs (coordinator mode)
// and --airflow-metadata [--format yaml|json], exiting with the right code.
// A bundle's main() usually calls cli.Main (package bundles/cli) instead,
// which adds the run, pack, inspect and version commands:
//
//	func main() { cli.Main(bundles.New().Register("my_dag", "extract", extract)) }
func Main(b *Bundle) {
	Exit(RunMain(context.Background(), b, os.Args[1:], os.Stdout, os.Stderr))
}

// served is set when Serve runs, so Exit knows the process is a task
// instance that Airflow's supervisor watches.
var served atomic.Bool

// Exit ends the process with code, as a bundle's main must once RunMain
// (or Serve) returns; Main and cli.Main do. After serving a task it first
// starts an exit holder (package exitorder) that keeps the process's
// output open until Airflow's supervisor can see the exit: otherwise the
// supervisor can see the output end first and then sleep 5 s before it
// looks for the exit again (docs/ARCHITECTURE.md, start-up).
//
// The holder outlives the process by microseconds and is reaped by the
// worker's init. On a host whose PID 1 reaps only its own children (a
// container running Airflow as PID 1, without --init or dumb-init) every
// holder would stay a zombie: there the operator sets ExitHolderEnv=off,
// and a task may again end up to 5 s late instead.
func Exit(code int) {
	if served.Load() {
		if on, warning := exitHolderWanted(os.LookupEnv); warning != "" {
			fmt.Fprintf(os.Stderr, "airflow-go-worker: %s\n", warning)
		} else if on {
			// Without a holder the process exits as it always did; only a
			// failure this platform should not have is worth a line.
			if _, err := exitorder.Hold(); err != nil && !errors.Is(err, errors.ErrUnsupported) {
				fmt.Fprintf(os.Stderr, "airflow-go-worker: %v; Airflow may notice this task ended up to min_heartbeat_interval (5 s) late\n", err)
			}
		}
	}
	os.Exit(code)
}

// ExitHolderEnv names the worker setting that turns the exit holder off
// ("off"); unset or "on" keeps it.
const ExitHolderEnv = "AIRFLOW_GO_WORKER_EXIT_HOLDER"

// exitHolderWanted reads ExitHolderEnv. A value it does not know starts no
// holder and says so: a holder the operator may have meant to turn off
// could leave zombies, a missing one costs at most 5 s.
func exitHolderWanted(lookup func(string) (string, bool)) (on bool, warning string) {
	switch v, _ := lookup(ExitHolderEnv); v {
	case "", "on":
		return true, ""
	case "off":
		return false, ""
	default:
		return false, fmt.Sprintf("%s=%q is neither on nor off; no exit holder was started (Airflow may notice this task ended up to 5 s late)", ExitHolderEnv, v)
	}
}

// Exit codes of RunMain.
const (
	ExitOK      = 0
	ExitFailure = 1 // protocol failure: Airflow records failed/up_for_retry
	ExitUsage   = 2 // bad command line
)

// RunMain runs the bundle's command line and returns the exit code, for
// Exit (not os.Exit). Airflow appends --comm and --logs as the last two
// arguments.
func RunMain(ctx context.Context, b *Bundle, args []string, stdout, stderr io.Writer) int {
	opts, err := ParseServeArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "airflow-go-worker: %v\n", err)
		return ExitUsage
	}
	if opts.Metadata {
		out, err := b.Manifest("", "").Encode(opts.Format)
		if err != nil {
			fmt.Fprintf(stderr, "airflow-go-worker: %v\n", err)
			return ExitUsage
		}
		if _, err := stdout.Write(out); err != nil {
			fmt.Fprintf(stderr, "airflow-go-worker: writing the output: %v\n", err)
			return ExitFailure
		}
		return ExitOK
	}
	if err := b.Serve(ctx, opts.Comm, opts.Logs); err != nil {
		fmt.Fprintf(stderr, "airflow-go-worker: %v\n", err)
		return ExitFailure
	}
	return ExitOK
}

// ServeArgs is the parsed bundle command line.
type ServeArgs struct {
	Comm, Logs string
	Metadata   bool
	Format     string
}

// ParseServeArgs accepts --comm/--logs (as --flag=value or --flag value),
// or --airflow-metadata with an optional --format. Anything else is an
// error naming it.
func ParseServeArgs(args []string) (ServeArgs, error) {
	var a ServeArgs
	formatSet := false
	for i := 0; i < len(args); i++ {
		arg := args[i]
		name, val, hasVal := strings.Cut(arg, "=")
		takeValue := func() (string, error) {
			if hasVal {
				return val, nil
			}
			if i+1 >= len(args) || strings.HasPrefix(args[i+1], "--") {
				return "", fmt.Errorf("flag %s needs a value", name)
			}
			i++
			return args[i], nil
		}
		var err error
		switch name {
		case "--comm":
			a.Comm, err = takeValue()
		case "--logs":
			a.Logs, err = takeValue()
		case "--format":
			a.Format, err = takeValue()
			formatSet = true
		case "--airflow-metadata":
			if hasVal {
				return a, errors.New("flag --airflow-metadata takes no value")
			}
			a.Metadata = true
		default:
			return a, fmt.Errorf("unknown argument %q (want --comm=HOST:PORT --logs=HOST:PORT, or --airflow-metadata [--format yaml|json])", arg)
		}
		if err != nil {
			return a, err
		}
	}
	switch {
	case formatSet && !a.Metadata:
		return a, errors.New("--format is only valid with --airflow-metadata")
	case a.Metadata && (a.Comm != "" || a.Logs != ""):
		return a, errors.New("--airflow-metadata cannot be combined with --comm/--logs")
	case a.Metadata:
		if a.Format != "" && a.Format != "yaml" && a.Format != "json" {
			return a, fmt.Errorf("unknown --format %q: use yaml or json", a.Format)
		}
		return a, nil
	case a.Comm == "" || a.Logs == "":
		return a, errors.New("--comm and --logs are required for bundle execution (Airflow passes them); use --airflow-metadata to print the manifest")
	}
	return a, nil
}
