// Command airflow-go-worker is the Go task bundle Airflow's
// ExecutableCoordinator forks once per task instance. It also packs itself
// into an AFBNDL01 bundle, inspects bundles, runs tasks locally through a
// real supervisor, and sweeps leftover sandboxes.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/selftest"
)

const usage = `usage:
  airflow-go-worker --comm=HOST:PORT --logs=HOST:PORT     run one task (Airflow does this)
  airflow-go-worker --airflow-metadata [--format yaml|json] print the bundle manifest
  airflow-go-worker run --dag D [--task T] [--conf JSON] [--state DIR] [--connections FILE] [--run-id ID] [--airflow 3.3|3.4]
                                                          run a task (or a whole Dag) locally
  airflow-go-worker pack [flags]                          pack this binary into an AFBNDL01 bundle
  airflow-go-worker inspect BUNDLE                        validate a bundle and print its manifest
  airflow-go-worker sweep [flags]                         remove leftover sandboxes
  airflow-go-worker version                               print versions

Task execution, --airflow-metadata and run accept --bundle-config FILE (a YAML
bundle config) in place of the config packed into this bundle, if any; pack
takes its config as --config, and inspect, sweep and version take none.
`

func main() {
	os.Exit(realMain(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// realMain dispatches the command line and returns the exit code.
func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, "airflow-go-worker: no arguments\n\n"+usage)
		return bundles.ExitUsage
	}
	report := func(err error) int {
		if err == nil {
			return bundles.ExitOK
		}
		fmt.Fprintf(stderr, "airflow-go-worker: %v\n", err)
		return bundles.ExitFailure
	}
	switch args[0] {
	case "pack":
		return report(runPack(args[1:], stdout, stderr))
	case "inspect":
		return report(runInspect(args[1:], stdout, stderr))
	case "sweep":
		return report(runSweep(args[1:]))
	case "version":
		if len(args) > 1 {
			fmt.Fprintf(stderr, "airflow-go-worker: version takes no arguments, got %q\n", args[1])
			return bundles.ExitUsage
		}
		printVersion(stdout)
		return bundles.ExitOK
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return bundles.ExitOK
	}

	rest, configPath, err := extractBundleConfig(args)
	if err != nil {
		fmt.Fprintf(stderr, "airflow-go-worker: %v\n", err)
		return bundles.ExitUsage
	}
	if len(rest) > 0 && rest[0] == "run" {
		return runCommand(ctx, rest[1:], configPath, stdout, stderr)
	}
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		switch rest[0] {
		case "pack", "inspect", "sweep", "version":
			// Only reachable with --bundle-config in front of the command.
			fmt.Fprintf(stderr, "airflow-go-worker: %s does not take --bundle-config (pack takes --config instead); drop it\n", rest[0])
			return bundles.ExitUsage
		}
		fmt.Fprintf(stderr, "airflow-go-worker: unknown command %q\n\n%s", rest[0], usage)
		return bundles.ExitUsage
	}
	b, err := newBundle(configPath)
	if err != nil {
		fmt.Fprintf(stderr, "airflow-go-worker: %v\n", err)
		return bundles.ExitUsage
	}
	return bundles.RunMain(ctx, b, rest, stdout, stderr)
}

// extractBundleConfig removes --bundle-config FILE (or =FILE) wherever it
// is: Airflow appends --comm/--logs after whatever the command holds.
func extractBundleConfig(args []string) (rest []string, path string, err error) {
	seen := false
	for i := 0; i < len(args); i++ {
		name, val, hasVal := strings.Cut(args[i], "=")
		if name != "--bundle-config" && name != "-bundle-config" {
			rest = append(rest, args[i])
			continue
		}
		if seen {
			return nil, "", errors.New("--bundle-config given twice; pass one config file")
		}
		seen = true
		if !hasVal {
			if i+1 >= len(args) || strings.HasPrefix(args[i+1], "-") {
				return nil, "", errors.New("--bundle-config needs a file name")
			}
			i++
			val = args[i]
		}
		if val == "" {
			return nil, "", errors.New("--bundle-config needs a file name")
		}
		path = val
	}
	return rest, path, nil
}

// newBundle registers the bundle config's tasks (the file at configPath if
// given, else the config packed into this binary). Without a config the
// binary is the plain self-test bundle; a config bundle lists exactly the
// config's tasks, plus the self-test Dag only if the config asks for it.
func newBundle(configPath string) (*bundles.Bundle, error) {
	b := bundles.New()
	var data []byte
	var source string
	if configPath != "" {
		var err error
		if data, err = os.ReadFile(configPath); err != nil {
			return nil, fmt.Errorf("--bundle-config: %w", err)
		}
		source = configPath
	} else {
		var err error
		if data, source, err = embeddedBundleConfig(); err != nil {
			return nil, err
		}
	}
	if data == nil {
		selftest.Register(b)
		return b, nil
	}
	// loadBundleConfig's errors already start with the source name.
	if err := loadBundleConfig(b, data, source); err != nil {
		return nil, err
	}
	return b, nil
}

func printVersion(w io.Writer) {
	fmt.Fprintf(w, "airflow-go-worker %s\n", bundles.Version())
	fmt.Fprintf(w, "go %s %s/%s\n", strings.TrimPrefix(runtime.Version(), "go"), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "supervisor schema %s (declared; speaks %s)\n", bundles.DeclaredSchemaVersion(), bundles.KnownSchemaVersions())
}
