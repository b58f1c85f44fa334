package bundles

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/internal/exitorder"
)

// Main serves Airflow and nothing else: --comm/--logs (coordinator mode)
// and --airflow-metadata [--format yaml|json], exiting with the right code.
// A bundle's main() usually calls cli.Main (package bundles/cli) instead,
// which adds the run, pack, inspect and version commands:
//
//	func main() { cli.Main(bundles.New().Register("my_dag", "extract", extract)) }
func Main(b *Bundle) {
	exitorder.Exit(b.Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// Run runs the bundle's command line as Airflow calls it (Main without the
// exit) and returns the exit code. Airflow appends --comm and --logs as the
// last two arguments.
func (b *Bundle) Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts, err := parseServeArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "airflow-go-worker: %v\n", err)
		return exitorder.Usage
	}
	if opts.Metadata {
		out, err := b.manifest("", "").Encode(opts.Format)
		if err != nil {
			fmt.Fprintf(stderr, "airflow-go-worker: %v\n", err)
			return exitorder.Usage
		}
		if _, err := stdout.Write(out); err != nil {
			fmt.Fprintf(stderr, "airflow-go-worker: writing the output: %v\n", err)
			return exitorder.Failure
		}
		return exitorder.OK
	}
	if err := b.Serve(ctx, opts.Comm, opts.Logs); err != nil {
		fmt.Fprintf(stderr, "airflow-go-worker: %v\n", err)
		return exitorder.Failure
	}
	return exitorder.OK
}

// serveArgs is the parsed bundle command line.
type serveArgs struct {
	Comm, Logs string
	Metadata   bool
	Format     string
}

// parseServeArgs accepts --comm/--logs (as --flag=value or --flag value),
// or --airflow-metadata with an optional --format. Anything else is an
// error naming it.
func parseServeArgs(args []string) (serveArgs, error) {
	var a serveArgs
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
