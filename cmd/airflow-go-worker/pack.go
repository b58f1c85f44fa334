package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/footer"
)

// defaultSchemaVersion is the supervisor schema version pack declares when
// neither --supervisor-schema-version nor the executable names one.
const defaultSchemaVersion = "2026-10-30"

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
	schema := fs.String("supervisor-schema-version", "", "supervisor schema version (YYYY-MM-DD) to declare; it must be one the target Airflow knows (default: the executable's own, else "+defaultSchemaVersion+")")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("pack: %w (see airflow-go-worker pack -h)", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("pack: unexpected argument %q; pack takes only flags (see pack -h)", fs.Arg(0))
	}
	if *schema != "" {
		if err := checkSchemaVersion(*schema); err != nil {
			return fmt.Errorf("pack: --supervisor-schema-version: %w", err)
		}
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
	if err := fillManifest(&m, exePath, *schema, stderr); err != nil {
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

// fillManifest completes what the executable printed with what only the
// packer knows. An explicit --supervisor-schema-version wins; otherwise the
// executable's own declaration is kept, because it knows which messages it
// speaks.
func fillManifest(m *footer.Manifest, exe, schemaFlag string, stderr io.Writer) error {
	if m.MetadataVersion == "" {
		m.MetadataVersion = footer.MetadataVersion
	}
	if m.SDK.Language == "" {
		m.SDK.Language = "go"
	}
	if m.SDK.Version == "" {
		m.SDK.Version = buildVersion(exe)
	}
	declared := m.SDK.SupervisorSchemaVersion
	switch {
	case schemaFlag != "":
		if declared != "" && declared != schemaFlag {
			fmt.Fprintf(stderr, "pack: warning: the executable declares supervisor_schema_version %s; --supervisor-schema-version %s overrides it\n", declared, schemaFlag)
		}
		m.SDK.SupervisorSchemaVersion = schemaFlag
	case declared != "":
		if err := checkSchemaVersion(declared); err != nil {
			return fmt.Errorf("it declares supervisor_schema_version %q: %v; pass --supervisor-schema-version", declared, err)
		}
	default:
		m.SDK.SupervisorSchemaVersion = defaultSchemaVersion
	}
	return nil
}

// buildVersion reads the main module version from a Go executable's build
// info without running it.
func buildVersion(exe string) string {
	bi, err := buildinfo.ReadFile(exe)
	if err != nil || bi.Main.Version == "" {
		return "(devel)"
	}
	return bi.Main.Version
}

func checkSchemaVersion(v string) error {
	if _, err := time.Parse("2006-01-02", v); err != nil || len(v) != len("2006-01-02") {
		return fmt.Errorf("%q is not a date in the form YYYY-MM-DD (e.g. %s)", v, defaultSchemaVersion)
	}
	return nil
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

// runInspect implements `airflow-go-worker inspect BUNDLE [--format yaml|json]`.
func runInspect(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: airflow-go-worker inspect BUNDLE [--format yaml|json]\n\nValidates an AFBNDL01 bundle as Airflow's coordinator does and prints its manifest and regions.\n\nFlags:\n")
		fs.SetOutput(stderr)
		fs.PrintDefaults()
	}
	format := fs.String("format", "yaml", "output format: yaml or json")
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
	b, err := footer.Read(paths[0])
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	// The coordinator considers only executable files and must exec the one
	// it picks: a valid bundle without x bits is silently never used.
	if fi, err := os.Stat(b.Path); err == nil && fi.Mode().Perm()&0o111 == 0 {
		fmt.Fprintf(stderr, "inspect: warning: %s is not executable; Airflow's coordinator skips or cannot run it (chmod 0755 %s)\n", b.Path, b.Path)
	}
	// The coordinator hashes only the binary; the cache digest also covers
	// the packed config and the manifest, so an edit to them shows here.
	if ok, known, err := b.CacheDigestMatches(); known && (err != nil || !ok) {
		fmt.Fprintf(stderr, "inspect: warning: digests.cache does not match the packed source and manifest; if airflow-go-worker packed %s, they were changed after packing (the coordinator does not check them): pack it again\n", b.Path)
	}
	report := inspectReport(b)
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
