package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/footer"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/schema"
	"github.com/airflow-sandbox/airflow-go-worker/internal/exeinfo"
)

// defaultAirflow is the Airflow release pack targets by default: the
// released one (3.3 knows only schema 2026-06-16 and rejects any other).
const defaultAirflow = schema.DefaultAirflow

// Bounds on running the executable for its manifest: it must only print
// metadata, so a minute and a few MiB are generous.
const (
	metadataTimeout  = time.Minute
	maxMetadataBytes = 16 << 20
	maxStderrBytes   = 64 << 10
)

const packUsage = `usage: airflow-go-worker pack [flags]

Packs an executable into a self-contained AFBNDL01 bundle that Airflow's
ExecutableCoordinator can run: the executable, a source region, its YAML
manifest (from running it with --airflow-metadata) and a 64-byte trailer.

The default output is dist/<executable name>.bundle, relative to the current
directory; copy it into a directory listed in the coordinator's
executables_root. The executable itself is never changed.

Flags:
`

// runPack implements `airflow-go-worker pack`.
func runPack(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("pack", flag.ContinueOnError)
	// Parse errors come back as our error (printed once, by main); only
	// -h prints the usage.
	fs.SetOutput(io.Discard)
	fs.Usage = func() { fmt.Fprint(stderr, packUsage); fs.SetOutput(stderr); fs.PrintDefaults() }
	exe := fs.String("executable", "", "executable to pack; it must answer --airflow-metadata (default: this airflow-go-worker binary)")
	output := fs.String("output", "", "where to write the bundle (default: dist/<executable name>.bundle)")
	sourcePath := fs.String("source", "", "file to embed as the source region (shown to Airflow as the bundle's source)")
	configPath := fs.String("config", "", "YAML bundle config: its tasks are registered (--bundle-config) and it is embedded as the source region, which the packed bundle reads at run time")
	airflow := fs.String("airflow", defaultAirflow, "Airflow release the bundle targets: 3.3 (schema "+schema.V33+") or 3.4 (schema "+schema.V34+"); it decides the supervisor schema version the bundle declares")
	schemaFlag := fs.String("supervisor-schema-version", "", "declare this supervisor schema version instead of --airflow's (one of: "+schema.Known()+")")
	if help, err := ParseFlags(fs, args); help || err != nil {
		return err
	}
	target, err := packSchema(fs, *airflow, *schemaFlag)
	if err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	if *sourcePath != "" && *configPath != "" {
		return errors.New("pack: use --config or --source, not both: the source region holds one file, and with --config it must be the config the bundle reads at run time")
	}

	exePath, err := resolveExecutable(*exe)
	if err != nil {
		return err
	}
	exeFlag := "--executable " + exePath
	if has, err := footer.HasFooter(exePath); err != nil {
		return fmt.Errorf("pack: %s: %w", exeFlag, err)
	} else if has {
		hint := "pass --executable with the plain binary from go build"
		if *exe == "" {
			hint = "this airflow-go-worker is itself a packed bundle; run pack from the plain binary (the output of go build) or pass --executable with it"
		}
		return fmt.Errorf("pack: %s is already an AFBNDL01 bundle; %s", exePath, hint)
	}

	var source []byte
	sourceName := filepath.Base(exePath)
	for _, f := range []struct{ flag, path string }{{"--source", *sourcePath}, {"--config", *configPath}} {
		if f.path == "" {
			continue
		}
		if source, err = os.ReadFile(f.path); err != nil {
			return fmt.Errorf("pack: %s: %w", f.flag, err)
		}
		sourceName = filepath.Base(f.path)
	}

	m, err := fetchManifest(exePath, *configPath)
	if err != nil {
		return fmt.Errorf("pack: %s: %w", exeFlag, err)
	}
	if len(m.Dags) == 0 {
		return fmt.Errorf("pack: %s declares no dags in its --airflow-metadata output; register tasks (or pass --config with a bundle config) before packing", exeFlag)
	}
	if err := fillManifest(&m, exePath, target, stderr); err != nil {
		return fmt.Errorf("pack: %s: %w", exeFlag, err)
	}
	m.Source = sourceName

	out := *output
	if out == "" {
		out = filepath.Join("dist", strings.TrimSuffix(filepath.Base(exePath), ".exe")+".bundle")
	} else if st, err := os.Stat(out); err == nil && st.IsDir() {
		return fmt.Errorf("pack: --output %s is a directory; give the bundle's file path, e.g. %s", out, filepath.Join(out, filepath.Base(exePath)+".bundle"))
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("pack: --output %s: %w", out, err)
	}
	// Pack next to the output and try the bundle there first, so a bundle
	// that cannot start never replaces a previous, working one.
	staged := filepath.Join(filepath.Dir(out), "."+filepath.Base(out)+".checking")
	b, err := footer.Pack(staged, exePath, source, m)
	if err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	if err := checkPackedBundle(staged, m); err != nil {
		os.Remove(staged)
		return fmt.Errorf("pack: %w; nothing was written to %s", err, out)
	}
	if err := os.Rename(staged, out); err != nil {
		os.Remove(staged)
		return fmt.Errorf("pack: --output %s: %w", out, err)
	}
	abs, _ := filepath.Abs(out)
	fmt.Fprintf(stdout, "packed %s\n  %d bytes: binary %d, source %d (%s), metadata %d, trailer %d\n  sdk %s %s, supervisor_schema_version %s\n  dags:\n",
		abs, b.Size, b.BinarySize(), b.SourceSize(), m.Source, b.MetadataSize(), footer.TrailerSize,
		m.SDK.Language, m.SDK.Version, m.SDK.SupervisorSchemaVersion)
	for _, id := range m.DagIDs() {
		fmt.Fprintf(stdout, "    %s: %s\n", id, strings.Join(m.Dags[id].Tasks, ", "))
	}
	return nil
}

// resolveExecutable returns the --executable path, or this binary's own.
func resolveExecutable(flagValue string) (string, error) {
	if flagValue != "" {
		st, err := os.Stat(flagValue)
		if err != nil {
			return "", fmt.Errorf("pack: --executable: %w", err)
		}
		if !st.Mode().IsRegular() {
			return "", fmt.Errorf("pack: --executable %s is not a regular file", flagValue)
		}
		return flagValue, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("pack: cannot find this binary (%v); pass --executable", err)
	}
	if resolved, err := filepath.EvalSymlinks(self); err == nil {
		self = resolved
	}
	return self, nil
}

// fetchManifest runs `exe --airflow-metadata [--bundle-config FILE]` and
// decodes what it prints: YAML by default, or JSON from older executables.
// It passes no --format, which those older executables do not know.
func fetchManifest(exe, config string) (footer.Manifest, error) {
	args := []string{"--airflow-metadata"}
	if config != "" {
		args = append(args, "--bundle-config", config)
	}
	// An absolute path, so exec runs this file and never searches $PATH for
	// a bare name such as "airflow-go-worker".
	if abs, err := filepath.Abs(exe); err == nil {
		exe = abs
	}
	ctx, cancel := context.WithTimeout(context.Background(), metadataTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	stdout := &cappedBuffer{max: maxMetadataBytes}
	stderr := &cappedBuffer{max: maxStderrBytes}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return footer.Manifest{}, fmt.Errorf("running it with %s did not finish within %s", strings.Join(args, " "), metadataTimeout)
	}
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg != "" {
			msg = "; it said: " + msg
		}
		hint := "it must print its manifest for --airflow-metadata"
		if config != "" {
			// The usual cause is the config itself: point the user at it.
			hint = "with --config it checks " + config + " before printing its manifest; fix what it names there"
		}
		return footer.Manifest{}, fmt.Errorf("running it with %s failed: %v%s (%s)", strings.Join(args, " "), err, msg, hint)
	}
	if stdout.overflow {
		return footer.Manifest{}, fmt.Errorf("its --airflow-metadata output is larger than %d bytes; that is not a manifest", maxMetadataBytes)
	}
	m, err := footer.DecodeManifest(stdout.Bytes())
	if err != nil {
		return footer.Manifest{}, fmt.Errorf("its --airflow-metadata output is not a manifest: %w", err)
	}
	return m, nil
}

// checkPackedBundle runs the new bundle with --airflow-metadata, as the
// coordinator would run it, so a bundle that cannot start (for example one
// whose embedded source region it fails to read as its config) is caught
// here rather than at the first task. It must declare the same dags.
func checkPackedBundle(path string, want footer.Manifest) error {
	got, err := fetchManifest(path, "")
	if err != nil {
		return fmt.Errorf("the packed bundle does not start: %w", err)
	}
	if g, w := strings.Join(got.DagIDs(), ", "), strings.Join(want.DagIDs(), ", "); g != w {
		return fmt.Errorf("the packed bundle declares dags [%s] but the executable declared [%s]; its embedded source region changes what it registers", g, w)
	}
	return nil
}

// schemaTarget is the supervisor schema version pack declares, and whether
// the user named it explicitly (which lets it override the executable's).
type schemaTarget struct {
	version  string
	explicit bool
	from     string // the flag that chose it, for messages
}

// packSchema resolves --airflow and --supervisor-schema-version. An
// explicit version must be one this runtime speaks; with an explicit
// --airflow too, both must agree.
func packSchema(fs *flag.FlagSet, airflow, version string) (schemaTarget, error) {
	airflowSet := false
	fs.Visit(func(f *flag.Flag) { airflowSet = airflowSet || f.Name == "airflow" })
	forAirflow, err := schema.ForAirflow(airflow)
	if err != nil {
		return schemaTarget{}, fmt.Errorf("--airflow: %w", err)
	}
	if version == "" {
		return schemaTarget{version: forAirflow, explicit: airflowSet, from: "--airflow " + airflow}, nil
	}
	if err := checkSchemaVersion(version); err != nil {
		return schemaTarget{}, fmt.Errorf("--supervisor-schema-version: %w", err)
	}
	if airflowSet && version != forAirflow {
		return schemaTarget{}, fmt.Errorf("--airflow %s declares supervisor schema %s, but --supervisor-schema-version says %s; pass one of them", airflow, forAirflow, version)
	}
	return schemaTarget{version: version, explicit: true, from: "--supervisor-schema-version " + version}, nil
}

// fillManifest completes what the executable printed with what only the
// packer knows. The declared schema version is the target's. An executable
// built with this module's runtime speaks every version it knows, so its
// own declaration is just a default; another executable speaks only what it
// declares, so a different target must be asked for explicitly.
func fillManifest(m *footer.Manifest, exe string, target schemaTarget, stderr io.Writer) error {
	if m.MetadataVersion == "" {
		m.MetadataVersion = footer.MetadataVersion
	}
	if m.SDK.Language == "" {
		m.SDK.Language = "go"
	}
	if m.SDK.Version == "" {
		m.SDK.Version = exeinfo.MainVersion(exe)
	}
	declared := m.SDK.SupervisorSchemaVersion
	switch {
	case declared == "" || declared == target.version || speaksEverySchema(exe):
	case target.explicit:
		fmt.Fprintf(stderr, "pack: warning: the executable declares supervisor_schema_version %s; %s overrides it, so the executable must speak %s\n", declared, target.from, target.version)
	default:
		if err := checkSchemaVersion(declared); err != nil {
			return fmt.Errorf("it declares supervisor_schema_version %q: %v; pack it for a schema it speaks with --supervisor-schema-version", declared, err)
		}
		return fmt.Errorf("it declares supervisor_schema_version %s, the schema it speaks, but pack targets %s (%s); pass --airflow or --supervisor-schema-version for the Airflow it was built for (schemas: %s)", declared, target.version, target.from, schema.Known())
	}
	m.SDK.SupervisorSchemaVersion = target.version
	return nil
}

// speaksEverySchema reports whether exe was built with this module's bundle
// runtime, which speaks every version in schema.All and reads the declared
// one from its own footer at start-up.
func speaksEverySchema(exe string) bool { return exeinfo.BuiltWithThisModule(exe) }

// checkSchemaVersion accepts a version this runtime knows, and says which
// those are otherwise.
func checkSchemaVersion(v string) error {
	if _, err := time.Parse("2006-01-02", v); err != nil || len(v) != len("2006-01-02") {
		return fmt.Errorf("%q is not a date in the form YYYY-MM-DD; known versions: %s", v, schema.Known())
	}
	return schema.Check(v)
}

// cappedBuffer keeps at most max bytes, so a runaway executable cannot
// exhaust memory; it records that it overflowed.
type cappedBuffer struct {
	bytes.Buffer
	max      int
	overflow bool
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); len(p) > room {
		c.overflow = true
		if room > 0 {
			c.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return c.Buffer.Write(p)
}

// runInspect implements `airflow-go-worker inspect BUNDLE [--format yaml|json] [--airflow 3.3|3.4]`.
func runInspect(args []string, stdout, stderr io.Writer) error {
	return inspect(args, stdout, stderr, nil, nil)
}

// inspect is runInspect with the program's check of a packed source
// region (nil: none) and what the program links (nil: unknown), reported
// beside a checked source since the check depends on it.
func inspect(args []string, stdout, stderr io.Writer, checkSource func(name string, data []byte) error, links func() map[string][]string) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: airflow-go-worker inspect BUNDLE [--format yaml|json] [--airflow 3.3|3.4]\n\nValidates an AFBNDL01 bundle as the ExecutableCoordinator of the target Airflow does, refuses it for the reason that coordinator would, and prints its manifest and regions.\n\nFlags:\n")
		fs.SetOutput(stderr)
		fs.PrintDefaults()
	}
	format := fs.String("format", "yaml", "output format: yaml or json")
	airflow := fs.String("airflow", defaultAirflow, "Airflow release whose coordinator must accept the bundle: 3.3 or 3.4")
	// Flags may come before or after the bundle path.
	var paths []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			return fmt.Errorf("inspect: %w (usage: airflow-go-worker inspect BUNDLE [--format yaml|json])", err)
		}
		if fs.NArg() == 0 {
			break
		}
		paths = append(paths, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(paths) != 1 {
		return fmt.Errorf("inspect: want exactly one BUNDLE path, got %d (usage: airflow-go-worker inspect BUNDLE [--format yaml|json])", len(paths))
	}
	if *format != "yaml" && *format != "json" {
		return fmt.Errorf("inspect: --format %q: use yaml or json", *format)
	}
	accepted, err := schema.AirflowKnows(*airflow)
	if err != nil {
		return fmt.Errorf("inspect: --airflow: %w", err)
	}
	b, err := footer.Read(paths[0])
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	if err := coordinatorRefusal(b, *airflow, accepted); err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	checked := false
	if checkSource != nil {
		src, name, ok, err := footer.ReadSource(b.Path)
		if err != nil {
			return fmt.Errorf("inspect: %w", err)
		}
		if ok {
			if err := checkSource(name, src); err != nil {
				return fmt.Errorf("inspect: the bundle's packed %s, loaded as this binary would run it: %w", name, err)
			}
			checked = true
		}
	}
	// The coordinator hashes only the binary; the cache digest also covers
	// the packed config and the manifest, so an edit to them shows here.
	if ok, known, err := b.CacheDigestMatches(); known && (err != nil || !ok) {
		fmt.Fprintf(stderr, "inspect: warning: digests.cache does not match the packed source and manifest; if airflow-go-worker packed %s, they were changed after packing (the coordinator does not check them): pack it again\n", b.Path)
	}
	// Airflow 3.3 does not read the source index; newer readers (Airflow's
	// Go SDK's inspect --source) need it to show the source.
	if err := b.CheckSourceIndex(); err != nil {
		fmt.Fprintf(stderr, "inspect: warning: %s: the source index: %v; Airflow 3.3 runs the bundle, but newer readers cannot show its source: pack it again\n", b.Path, err)
	}
	report := inspectReport(b)
	if checked && links != nil {
		report["source_checked_with"] = links()
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	text, err := footer.RenderYAML(report)
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	fmt.Fprintf(stdout, "# %s: valid AFBNDL01 bundle\n%s", b.Path, text)
	return nil
}

// coordinatorRefusal says why Airflow's ExecutableCoordinator (of release
// airflow, which accepts the schema versions in accepted) would not run a
// bundle that is otherwise well formed, quoting the reason it gives.
func coordinatorRefusal(b *footer.Bundle, airflow string, accepted []string) error {
	// It considers only regular files the worker may execute (os.access
	// X_OK) and skips any other without a word: the task then fails with
	// "cannot find executable bundle containing dag_id=...".
	if err := syscall.Access(b.Path, 1 /* X_OK */); err != nil {
		return fmt.Errorf("%s is not executable (%v): Airflow's coordinator considers only files the worker user can execute and skips this one silently, so its tasks fail with \"cannot find executable bundle containing dag_id=...\"; chmod 0755 %s", b.Path, err, b.Path)
	}
	v := b.Manifest.SDK.SupervisorSchemaVersion
	for _, a := range accepted {
		if v == a {
			return nil
		}
	}
	hint := "pack it again with --airflow " + airflow
	if newer, err := schema.ForAirflow("3.4"); err == nil && v == newer && airflow != "3.4" {
		hint += ", or check it with inspect --airflow 3.4 if it is meant for Airflow 3.4"
	}
	return fmt.Errorf("%s: Airflow %s's coordinator rejects this bundle: \"Version '%s' not found in supervisor schema bundle\" (it knows %s), so its tasks fail with \"cannot find executable bundle with usable supervisor_schema_version\"; %s", b.Path, airflow, v, strings.Join(accepted, ", "), hint)
}

func inspectReport(b *footer.Bundle) map[string]any {
	region := func(off, n int64) map[string]any { return map[string]any{"offset": off, "length": n} }
	src := region(b.SourceStart, b.SourceSize())
	src["name"] = b.Manifest.Source
	return map[string]any{
		"bundle":         b.Path,
		"size":           b.Size,
		"footer_version": b.Trailer.FooterVersion,
		"binary_sha256":  fmt.Sprintf("%x", b.Trailer.BinarySHA256),
		"regions": map[string]any{
			"binary":   region(0, b.BinarySize()),
			"source":   src,
			"metadata": region(b.MetadataStart, b.MetadataSize()),
			"trailer":  region(b.TrailerStart, footer.TrailerSize),
		},
		"manifest": b.Manifest.ToMap(),
	}
}
