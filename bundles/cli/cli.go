// Package cli is the command line every bundle gets: besides serving
// Airflow (--comm/--logs) and printing its manifest (--airflow-metadata),
// which package bundles implements,
//
//	run      run a task or a whole Dag through a local supervisor
//	pack     pack a binary into an AFBNDL01 bundle
//	inspect  validate a bundle as Airflow's coordinator does
//	check    check Dags against the bundles Airflow would run them with
//	describe print every task and the inputs it reads from XCom (JSON)
//	version  print versions
//
// A Go user's bundle gets them with one line:
//
//	func main() { cli.Main(bundles.New().Register("my_dag", "extract", extract)) }
//
// run --bundle FILE runs any AFBNDL01 bundle (ours or one built with
// Airflow's Go SDK) under the same supervisor.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/schema"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/taskinfo"
	"github.com/airflow-sandbox/airflow-go-worker/internal/buildinfo"
	"github.com/airflow-sandbox/airflow-go-worker/internal/exitorder"
)

// Command is an extra subcommand a program adds (the catalogue's sweep).
type Command struct {
	Name    string
	Usage   string // its arguments, for the program's usage ("[flags]")
	Summary string // what it does, in a few words
	Run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// Program is a bundle's command line.
type Program struct {
	// Name is used in messages; default: the executable's base name.
	Name string
	// Bundle builds the bundle when a command needs it (task execution,
	// --airflow-metadata, run); pack, inspect and version do not call it.
	Bundle func() (*bundles.Bundle, error)
	// ForkArgs are passed to every child run forks, before --comm/--logs
	// (the catalogue passes its --bundle-config).
	ForkArgs []string
	// Commands are extra subcommands.
	Commands []Command
	// Notes are appended to the usage text.
	Notes string
	// CheckSource, when set, checks the source region of a bundle
	// inspect reads (the catalogue loads a packed bundle config, so inspect
	// refuses what it would refuse at run time).
	CheckSource func(name string, data []byte) error
	// Links, when set, says what this binary links that its bundle configs
	// may name, by kind (the catalogue: "backends", "stores"); version
	// prints it, and inspect reports it beside a source CheckSource checked.
	Links func() map[string][]string
}

// Main runs b's command line and exits with its code.
func Main(b *bundles.Bundle) {
	exitorder.Exit(Program{Bundle: func() (*bundles.Bundle, error) { return b, nil }}.Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func (p Program) name() string {
	if p.Name != "" {
		return p.Name
	}
	return filepath.Base(os.Args[0])
}

// Usage is the program's usage text.
func (p Program) Usage() string {
	n := p.name()
	var b strings.Builder
	fmt.Fprintf(&b, "usage:\n")
	line := func(cmd, what string) { fmt.Fprintf(&b, "  %-56s %s\n", n+" "+cmd, what) }
	line("--comm=HOST:PORT --logs=HOST:PORT", "run one task (Airflow does this)")
	line("--airflow-metadata [--format yaml|json]", "print the bundle manifest")
	fmt.Fprintf(&b, "  %s run --dag D [--task T] [--bundle FILE] [--conf JSON] [--state DIR] [--connections FILE] [--run-id ID] [--airflow 3.3|3.4]\n", n)
	fmt.Fprintf(&b, "  %-56s %s\n", "", "run a task (or a whole Dag) locally")
	line("pack [flags]", "pack this binary into an AFBNDL01 bundle")
	line("inspect BUNDLE", "validate a bundle and print its manifest")
	line("check --dags PATH --executables-root DIR", "check Dags against the bundles Airflow would run them with")
	line("describe", "print every task and its XCom-bound inputs (JSON)")
	for _, c := range p.Commands {
		line(c.Name+" "+c.Usage, c.Summary)
	}
	line("version", "print versions")
	if p.Notes != "" {
		b.WriteString("\n" + p.Notes)
	}
	return b.String()
}

// Run dispatches the command line and returns the exit code.
func (p Program) Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	n := p.name()
	if len(args) == 0 {
		fmt.Fprintf(stderr, "%s: no arguments\n\n%s", n, p.Usage())
		return exitorder.Usage
	}
	report := func(err error) int {
		if err == nil {
			return exitorder.OK
		}
		fmt.Fprintf(stderr, "%s: %v\n", n, err)
		return exitorder.Failure
	}
	switch args[0] {
	case "pack":
		return report(runPack(args[1:], stdout, stderr))
	case "inspect":
		return report(inspect(args[1:], stdout, stderr, p.CheckSource, p.Links))
	case "version":
		if len(args) > 1 {
			fmt.Fprintf(stderr, "%s: version takes no arguments, got %q\n", n, args[1])
			return exitorder.Usage
		}
		printVersion(stdout, n)
		if p.Links != nil {
			fmt.Fprintf(stdout, "links %s\n", formatLinks(p.Links()))
		}
		return exitorder.OK
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, p.Usage())
		return exitorder.OK
	case "run":
		return p.runCommand(ctx, args[1:], stdout, stderr)
	case "describe":
		return report(p.describe(args[1:], stdout))
	case "check":
		return report(runCheck(ctx, args[1:], stdout, stderr))
	}
	for _, c := range p.Commands {
		if args[0] == c.Name {
			return report(c.Run(ctx, args[1:], stdout, stderr))
		}
	}
	if !strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n%s", n, args[0], p.Usage())
		return exitorder.Usage
	}
	b, err := p.Bundle()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", n, err)
		return exitorder.Usage
	}
	return b.Run(ctx, args, stdout, stderr)
}

func printVersion(w io.Writer, name string) {
	fmt.Fprintf(w, "%s %s\n", name, buildinfo.Version())
	fmt.Fprintf(w, "go %s %s/%s\n", strings.TrimPrefix(runtime.Version(), "go"), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "supervisor schema %s (declared; speaks %s)\n", schema.Declared(), schema.Known())
}

// formatLinks renders Links as "backends: local; stores: file, s3".
func formatLinks(links map[string][]string) string {
	var parts []string
	for _, kind := range slices.Sorted(maps.Keys(links)) {
		names := "none"
		if len(links[kind]) > 0 {
			names = strings.Join(links[kind], ", ")
		}
		parts = append(parts, kind+": "+names)
	}
	return strings.Join(parts, "; ")
}

// dagTasks is what run can run: task ids by Dag, in registration order.
type dagTasks struct {
	order []string
	tasks map[string][]string
}

func tasksOfBundle(b *bundles.Bundle) dagTasks {
	d := dagTasks{tasks: map[string][]string{}}
	for _, t := range taskinfo.Describe(b) {
		if _, ok := d.tasks[t.DagID]; !ok {
			d.order = append(d.order, t.DagID)
		}
		d.tasks[t.DagID] = append(d.tasks[t.DagID], t.TaskID)
	}
	return d
}

// dagNames lists the Dag ids, sorted, for errors that must say which --dag
// values exist.
func (d dagTasks) dagNames() []string {
	names := append([]string(nil), d.order...)
	sort.Strings(names)
	return names
}

// resolve turns --dag/--task into the tasks to run, so a typo fails with
// the ids that do exist instead of a "removed" task.
func (d dagTasks) resolve(dagID, taskID string) ([]string, error) {
	ids := d.tasks[dagID]
	if len(ids) == 0 {
		return nil, fmt.Errorf("--dag %q is not in this bundle; its Dags are: %s", dagID, strings.Join(d.dagNames(), ", "))
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

func errOrNull(err error) error {
	if err == nil {
		return errors.New("got null")
	}
	return err
}

// ParseFlags parses a command's flags; the commands take no positional
// arguments. help reports that -h printed the usage, which is a success.
// err names the command, what was wrong, and where its usage is.
func ParseFlags(fs *flag.FlagSet, args []string) (help bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, fmt.Errorf("%s: %w (see %s -h)", fs.Name(), err, fs.Name())
	}
	if fs.NArg() > 0 {
		return false, fmt.Errorf("%s: unexpected argument %q; it takes only flags (see %s -h)", fs.Name(), fs.Arg(0), fs.Name())
	}
	return false, nil
}
