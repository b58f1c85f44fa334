package catalogue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/cli"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/selftest"
	"github.com/airflow-sandbox/airflow-go-worker/internal/exitorder"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/registry"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

const notes = `Task execution, --airflow-metadata and run accept --bundle-config FILE (a YAML
bundle config) in place of the config packed into this bundle, if any; pack
takes its config as --config, and inspect, sweep and version take none.
`

// Main is the whole main() of a standard bundle: the YAML bundle config
// packed into it (or given as --bundle-config) decides its tasks, and it
// has every bundle command plus sweep. The main package imports the
// sandbox backends and storage drivers it links.
func Main() {
	exitorder.Exit(Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// Run is Main's command line, returning the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	prog := cli.Program{Commands: []cli.Command{SweepCommand}, Notes: notes, CheckSource: checkPackedConfig, Links: links}
	name := filepath.Base(os.Args[0])
	if len(args) > 0 {
		switch args[0] {
		case "pack", "inspect", "version", "help", "-h", "-help", "--help", SweepCommand.Name:
			return prog.Run(ctx, args, stdout, stderr)
		}
	}
	rest, configPath, err := extractBundleConfig(args)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitorder.Usage
	}
	if len(rest) > 0 {
		switch rest[0] {
		case "pack", "inspect", "version", SweepCommand.Name:
			// Only reachable with --bundle-config in front of the command.
			fmt.Fprintf(stderr, "%s: %s does not take --bundle-config (pack takes --config instead); drop it\n", name, rest[0])
			return exitorder.Usage
		}
	}
	if configPath != "" {
		abs, err := filepath.Abs(configPath)
		if err != nil {
			fmt.Fprintf(stderr, "%s: --bundle-config: %v\n", name, err)
			return exitorder.Usage
		}
		prog.ForkArgs = []string{"--bundle-config", abs}
	}
	prog.Bundle = func() (*bundles.Bundle, error) { return NewBundle(configPath) }
	return prog.Run(ctx, rest, stdout, stderr)
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

// NewBundle registers a bundle config's tasks: the file at configPath if
// given, else the config packed into this binary. Without a config the
// bundle is the plain self-test bundle; a config bundle lists exactly the
// config's tasks, plus the self-test Dag only if the config asks for it.
func NewBundle(configPath string) (*bundles.Bundle, error) {
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
	// Load's errors already start with the source name.
	if err := Load(b, data, source); err != nil {
		return nil, err
	}
	return b, nil
}

// checkPackedConfig loads a YAML source region as this binary would at run
// time, with the backends this binary links: inspect then refuses a packed
// config asking a backend for what it cannot do, as --airflow-metadata and
// the task would.
func checkPackedConfig(name string, data []byte) error {
	if !isYAMLName(name) {
		return nil
	}
	return Load(bundles.New(), data, name)
}

// links is what a bundle config may name in this binary: the sandbox
// backends and the storage URL schemes it links.
func links() map[string][]string {
	return map[string][]string{"backends": registry.Default.Names(), "stores": storage.Default.Names()}
}
