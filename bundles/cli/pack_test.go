package cli

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/footer"
)

// fakeMetadataEnv turns this test binary into an executable that answers
// --airflow-metadata, so pack's default (os.Executable) can be tested.
const fakeMetadataEnv = "AIRFLOW_GO_WORKER_PACK_TEST_FAKE_METADATA"

func TestMain(m *testing.M) {
	if os.Getenv(fakeMetadataEnv) == "1" {
		fmt.Print("airflow_bundle_metadata_version: \"1.0\"\nsdk:\n  language: go\n  version: v0.0.1\ndags:\n  self_dag:\n    tasks: [ping]\n")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const fakeYAML = `airflow_bundle_metadata_version: "1.0"
sdk:
  language: go
  version: v9.9.9
  supervisor_schema_version: "2026-06-16"
  build: abc
dags:
  etl:
    tasks: [extract, "123", load]
  report:
    tasks: [render]
vendor_note: keep me
`

// fakeExe writes a shell script that records each run's arguments in
// args.txt and prints stdout (and stderr), exiting with code. A script is
// enough: pack only runs the executable for --airflow-metadata and copies its
// bytes; the packed copy still runs, as the script exits before the footer.
func fakeExe(t *testing.T, stdout string, code int, stderr string) string {
	return fakeExeAsBundle(t, stdout, code, stderr, nil)
}

// fakeExeAsBundle is fakeExe whose packed copy (run from another path)
// prints bundleStdout instead, when it is not nil.
func fakeExeAsBundle(t *testing.T, stdout string, code int, stderr string, bundleStdout *string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{"stdout.txt": stdout, "stderr.txt": stderr}
	if bundleStdout != nil {
		files["bundle-stdout.txt"] = *bundleStdout
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(dir, "fake-exe")
	script := fmt.Sprintf(`#!/bin/sh
d='%s'
printf '%%s\n' "$@" '---' >> "$d/args.txt"
out="$d/stdout.txt"
if [ "$0" != "$d/fake-exe" ] && [ -f "$d/bundle-stdout.txt" ]; then out="$d/bundle-stdout.txt"; fi
cat "$d/stderr.txt" >&2
cat "$out"
exit %d
`, dir, code)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// recordedArgs returns the arguments of each run of the fake executable.
func recordedArgs(t *testing.T, exe string) [][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(exe), "args.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var runs [][]string
	var cur []string
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "---" {
			runs = append(runs, cur)
			cur = nil
			continue
		}
		cur = append(cur, line)
	}
	return runs
}

func pack(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := runPack(args, &out, &errb)
	return out.String(), errb.String(), err
}

func inspectJSON(t *testing.T, path string, flags ...string) map[string]any {
	t.Helper()
	var out bytes.Buffer
	if err := runInspect(append([]string{path, "--format", "json"}, flags...), &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("inspect json output: %v\n%s", err, out.String())
	}
	return got
}

func TestPackInspectRoundTrip(t *testing.T) {
	exe := fakeExe(t, fakeYAML, 0, "")
	cfg := filepath.Join(t.TempDir(), "pipeline.yaml")
	cfgBody := "dags:\n  etl: {}\n"
	if err := os.WriteFile(cfg, []byte(cfgBody), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "sub", "etl.bundle")
	stdout, stderr, err := pack(t, "--executable", exe, "--output", out, "--config", cfg)
	if err != nil {
		t.Fatalf("pack: %v\n%s", err, stderr)
	}
	// First the executable with the config, then the packed bundle on its own.
	if want := [][]string{{"--airflow-metadata", "--bundle-config", cfg}, {"--airflow-metadata"}}; !reflect.DeepEqual(recordedArgs(t, exe), want) {
		t.Errorf("runs %q, want %q", recordedArgs(t, exe), want)
	}
	for _, want := range []string{out, "etl: extract, 123, load", "report: render", "supervisor_schema_version 2026-06-16", "(pipeline.yaml)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("pack output does not mention %q:\n%s", want, stdout)
		}
	}

	// The file, checked against the spec independently of the footer package.
	exeBytes, _ := os.ReadFile(exe)
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	tr := data[len(data)-64:]
	srcLen, metaLen := binary.LittleEndian.Uint32(tr[0:]), binary.LittleEndian.Uint32(tr[4:])
	sum := sha256.Sum256(exeBytes)
	switch {
	case !bytes.Equal(data[:len(exeBytes)], exeBytes):
		t.Error("binary region is not the executable")
	case int(srcLen) != len(cfgBody) || string(data[len(exeBytes):len(exeBytes)+len(cfgBody)]) != cfgBody:
		t.Errorf("source region (%d bytes) is not the config", srcLen)
	case len(exeBytes)+int(srcLen)+int(metaLen)+64 != len(data):
		t.Errorf("regions %d+%d+%d+64 do not add up to the file size %d", len(exeBytes), srcLen, metaLen, len(data))
	case binary.LittleEndian.Uint32(tr[8:]) != 1:
		t.Error("footer_ver is not 1")
	case !bytes.Equal(tr[12:44], sum[:]):
		t.Error("binary_sha256 is not the executable's SHA-256")
	case !bytes.Equal(tr[44:56], make([]byte, 12)):
		t.Error("reserved bytes are not zero")
	case string(tr[56:]) != "AFBNDL01":
		t.Error("magic missing")
	}
	if entries, _ := os.ReadDir(filepath.Dir(out)); len(entries) != 1 {
		t.Errorf("the output directory holds %d files, want just the bundle", len(entries))
	}
	if st, _ := os.Stat(out); st.Mode().Perm() != 0o755 {
		t.Errorf("bundle mode %v, want 0755", st.Mode().Perm())
	}

	got := inspectJSON(t, out)
	man := got["manifest"].(map[string]any)
	sdk := man["sdk"].(map[string]any)
	if man["source"] != "pipeline.yaml" || sdk["version"] != "v9.9.9" || sdk["build"] != "abc" || man["vendor_note"] != "keep me" {
		t.Errorf("manifest lost or changed fields: %v", man)
	}
	tasks := man["dags"].(map[string]any)["etl"].(map[string]any)["tasks"]
	if !reflect.DeepEqual(tasks, []any{"extract", "123", "load"}) {
		t.Errorf("etl tasks %v", tasks)
	}
	if man["digests"].(map[string]any)["integrity"] != fmt.Sprintf("%x", sum) {
		t.Errorf("digests.integrity %v", man["digests"])
	}
	regions := got["regions"].(map[string]any)
	if regions["source"].(map[string]any)["length"] != float64(len(cfgBody)) || regions["binary"].(map[string]any)["length"] != float64(len(exeBytes)) {
		t.Errorf("regions %v", regions)
	}

	// The YAML form carries the same manifest.
	var yout bytes.Buffer
	if err := runInspect([]string{"--format=yaml", out}, &yout, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var y map[string]any
	if err := yaml.Unmarshal(yout.Bytes(), &y); err != nil {
		t.Fatalf("inspect yaml output is not YAML: %v\n%s", err, yout.String())
	}
	if y["manifest"].(map[string]any)["source"] != "pipeline.yaml" || y["binary_sha256"] != fmt.Sprintf("%x", sum) {
		t.Errorf("yaml inspect: %v", y)
	}
}

func TestPackAcceptsJSONMetadataAndSource(t *testing.T) {
	js := `{
    "airflow_bundle_metadata_version": "1.0",
    "sdk": {"language": "go", "version": "v1"},
    "dags": {"d": {"tasks": ["t"]}}
}
`
	exe := fakeExe(t, js, 0, "")
	src := filepath.Join(t.TempDir(), "main.go")
	os.WriteFile(src, []byte("package main\n"), 0o644)
	out := filepath.Join(t.TempDir(), "b")
	if _, stderr, err := pack(t, "--executable", exe, "--output", out, "--source", src); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if want := []string{"--airflow-metadata"}; !reflect.DeepEqual(recordedArgs(t, exe)[0], want) {
		t.Errorf("args %q, want %q (no --format, which an older executable printing JSON does not know, and no --bundle-config without --config)", recordedArgs(t, exe)[0], want)
	}
	man := inspectJSON(t, out)["manifest"].(map[string]any)
	if man["source"] != "main.go" || man["sdk"].(map[string]any)["supervisor_schema_version"] != "2026-06-16" {
		t.Errorf("manifest %v", man)
	}
}

// The declared schema follows the target Airflow: 3.3 by default, the only
// released one. An executable that is not built with this module's runtime
// speaks only what it declares, so packing it for another schema must be
// asked for explicitly.
func TestPackSchemaVersion(t *testing.T) {
	declares34 := strings.Replace(fakeYAML, "2026-06-16", "2026-10-30", 1)
	none := strings.Replace(fakeYAML, "  supervisor_schema_version: \"2026-06-16\"\n", "", 1)
	cases := []struct {
		name, metadata string
		flags          []string
		want, warning  string
	}{
		{"default is Airflow 3.3", none, nil, "2026-06-16", ""},
		{"--airflow 3.4", none, []string{"--airflow", "3.4"}, "2026-10-30", ""},
		{"--airflow patch release", none, []string{"--airflow", "3.3.2"}, "2026-06-16", ""},
		{"explicit version", none, []string{"--supervisor-schema-version", "2026-10-30"}, "2026-10-30", ""},
		{"executable's own agrees", declares34, []string{"--airflow", "3.4"}, "2026-10-30", ""},
		{"explicit flag overrides the executable", declares34, []string{"--supervisor-schema-version", "2026-06-16"}, "2026-06-16", "overrides it"},
		{"explicit --airflow overrides the executable", declares34, []string{"--airflow", "3.3"}, "2026-06-16", "overrides it"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "b")
			args := append([]string{"--executable", fakeExe(t, c.metadata, 0, ""), "--output", out}, c.flags...)
			_, stderr, err := pack(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			if c.warning != "" && !strings.Contains(stderr, c.warning) {
				t.Errorf("no warning %q in %q", c.warning, stderr)
			}
			got := inspectJSON(t, out, "--airflow", "3.4")["manifest"].(map[string]any)["sdk"].(map[string]any)["supervisor_schema_version"]
			if got != c.want {
				t.Errorf("supervisor_schema_version %v, want %s", got, c.want)
			}
		})
	}
	for _, c := range []struct {
		name, metadata string
		flags, want    []string
	}{
		{"the executable speaks another schema", declares34, nil, []string{"declares supervisor_schema_version 2026-10-30", "targets 2026-06-16 (--airflow 3.3)", "--airflow or --supervisor-schema-version"}},
		{"unknown version", none, []string{"--supervisor-schema-version", "2026-07-30"}, []string{`"2026-07-30" is not one this bundle speaks`, "2026-06-16 (Airflow 3.3), 2026-10-30 (Airflow 3.4)"}},
		{"not a date", none, []string{"--supervisor-schema-version", "2026-13-01"}, []string{"YYYY-MM-DD", "known versions: 2026-06-16 (Airflow 3.3)"}},
		{"unknown Airflow", none, []string{"--airflow", "2.10"}, []string{`Airflow "2.10"`, "3.3 or 3.4"}},
		{"both disagree", none, []string{"--airflow", "3.3", "--supervisor-schema-version", "2026-10-30"}, []string{"--airflow 3.3 declares supervisor schema 2026-06-16", "pass one of them"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"--executable", fakeExe(t, c.metadata, 0, ""), "--output", filepath.Join(t.TempDir(), "b")}, c.flags...)
			_, _, err := pack(t, args...)
			for _, w := range c.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v does not say %q", err, w)
				}
			}
		})
	}
}

func TestPackDefaultsToThisBinaryAndDist(t *testing.T) {
	t.Setenv(fakeMetadataEnv, "1")
	t.Chdir(t.TempDir())
	stdout, stderr, err := pack(t)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	self, _ := os.Executable()
	want := filepath.Join("dist", filepath.Base(self)+".bundle")
	if _, err := os.Stat(want); err != nil {
		t.Fatalf("default output %s: %v\n%s", want, err, stdout)
	}
	man := inspectJSON(t, want)["manifest"].(map[string]any)
	if man["source"] != filepath.Base(self) || man["dags"].(map[string]any)["self_dag"] == nil {
		t.Errorf("manifest %v", man)
	}
}

func TestPackErrorsNameTheCulprit(t *testing.T) {
	good := fakeExe(t, fakeYAML, 0, "")
	bundleDir := t.TempDir()
	bundle := filepath.Join(bundleDir, "already.bundle")
	if _, _, err := pack(t, "--executable", good, "--output", bundle); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(cfg, []byte("x: 1\n"), 0o644)
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"executable fails", []string{"--executable", fakeExe(t, "", 3, "unknown flag --airflow-metadata\n")}, []string{"--executable", "exit status 3", "unknown flag --airflow-metadata"}},
		{"garbage metadata", []string{"--executable", fakeExe(t, "- just\n- a list\n", 0, "")}, []string{"--executable", "not a manifest", "list, not a mapping"}},
		{"no dags", []string{"--executable", fakeExe(t, "sdk: {language: go}\n", 0, "")}, []string{"--executable", "declares no dags"}},
		{"bad declared schema", []string{"--executable", fakeExe(t, strings.Replace(fakeYAML, "2026-06-16", "soon", 1), 0, "")}, []string{"supervisor_schema_version \"soon\"", "--supervisor-schema-version"}},
		{"already a bundle", []string{"--executable", bundle}, []string{bundle, "already an AFBNDL01 bundle", "plain binary"}},
		{"missing executable", []string{"--executable", filepath.Join(t.TempDir(), "nope")}, []string{"--executable", "no such file"}},
		{"bad schema flag", []string{"--executable", good, "--supervisor-schema-version", "2026-13-01"}, []string{"--supervisor-schema-version", "YYYY-MM-DD", "known versions"}},
		{"source and config", []string{"--executable", good, "--source", cfg, "--config", cfg}, []string{"--config or --source"}},
		{"missing config", []string{"--executable", good, "--config", filepath.Join(t.TempDir(), "none.yaml")}, []string{"--config", "no such file"}},
		{"config rejected", []string{"--executable", fakeExe(t, "", 2, "c.yaml: unknown key \"taks\"\n"), "--config", cfg}, []string{`unknown key "taks"`, "with --config it checks " + cfg + " before printing its manifest; fix what it names there"}},
		{"positional", []string{"--executable", good, "extra"}, []string{`unexpected argument "extra"`}},
		{"unknown flag", []string{"--nope"}, []string{"-nope", "pack -h"}},
		{"output is a directory", []string{"--executable", good, "--output", bundleDir}, []string{"--output " + bundleDir + " is a directory"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Chdir(t.TempDir())
			_, _, err := pack(t, c.args...)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if _, err := os.Stat("dist"); !os.IsNotExist(err) {
				t.Error("a failed pack created dist/")
			}
		})
	}
}

// inspect refuses what Airflow's coordinator would not run, for the reason
// it gives: a file the worker cannot execute (skipped silently), and a
// supervisor schema version the target Airflow does not know.
func TestInspectRefusesWhatTheCoordinatorRejects(t *testing.T) {
	packed := func(flags ...string) string {
		out := filepath.Join(t.TempDir(), "b")
		if _, _, err := pack(t, append([]string{"--executable", fakeExe(t, fakeYAML, 0, ""), "--output", out}, flags...)...); err != nil {
			t.Fatal(err)
		}
		return out
	}
	inspect := func(flags ...string) (string, error) {
		var stderr bytes.Buffer
		err := runInspect(flags, &bytes.Buffer{}, &stderr)
		return stderr.String(), err
	}
	for3 := packed()
	if warn, err := inspect(for3); err != nil || warn != "" {
		t.Fatalf("a bundle for Airflow 3.3: %v %q", err, warn)
	}
	if err := os.Chmod(for3, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := inspect(for3); err == nil || !strings.Contains(err.Error(), "is not executable") || !strings.Contains(err.Error(), "chmod 0755") || !strings.Contains(err.Error(), "cannot find executable bundle containing dag_id=") {
		t.Fatalf("a non-executable bundle: %v", err)
	}

	for4 := packed("--supervisor-schema-version", "2026-10-30")
	_, err := inspect(for4)
	for _, w := range []string{"Airflow 3.3's coordinator rejects", `"Version '2026-10-30' not found in supervisor schema bundle"`, "it knows 2026-06-16", "--airflow 3.3", "inspect --airflow 3.4"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("a 3.4 bundle under 3.3: error %v does not say %q", err, w)
		}
	}
	if _, err := inspect(for4, "--airflow", "3.4"); err != nil {
		t.Errorf("a 3.4 bundle under 3.4: %v", err)
	}
	if _, err := inspect(for3, "--airflow", "2.10"); err == nil || !strings.Contains(err.Error(), "--airflow") {
		t.Errorf("an unknown --airflow: %v", err)
	}

	// A version no Airflow knows cannot be packed; write one directly.
	m, err := footer.DecodeManifest([]byte(strings.Replace(fakeYAML, "2026-06-16", "2026-07-30", 1)))
	if err != nil {
		t.Fatal(err)
	}
	unknown := filepath.Join(t.TempDir(), "unknown")
	if _, err := footer.Pack(unknown, fakeExe(t, fakeYAML, 0, ""), nil, m); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"3.3", "3.4"} {
		if _, err := inspect(unknown, "--airflow", target); err == nil || !strings.Contains(err.Error(), `"Version '2026-07-30' not found in supervisor schema bundle"`) {
			t.Errorf("an unknown schema under %s: %v", target, err)
		}
	}
}

func TestInspectCorruptAndUsage(t *testing.T) {
	out := filepath.Join(t.TempDir(), "b")
	if _, _, err := pack(t, "--executable", fakeExe(t, fakeYAML, 0, ""), "--output", out); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(out)
	data[3] ^= 1 // modify the binary after packing
	bad := filepath.Join(t.TempDir(), "bad")
	os.WriteFile(bad, data, 0o755)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{bad}, "binary SHA-256 mismatch"},
		{[]string{}, "exactly one BUNDLE"},
		{[]string{out, out}, "exactly one BUNDLE"},
		{[]string{out, "--format", "xml"}, `--format "xml"`},
		{[]string{filepath.Join(t.TempDir(), "none")}, "no such file"},
		{[]string{"--bogus", out}, "-bogus"},
	}
	for _, c := range cases {
		err := runInspect(c.args, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("inspect %q: error %v, want %q", c.args, err, c.want)
		}
	}
}

func TestPackAndInspectHelp(t *testing.T) {
	for name, run := range map[string]func([]string, io.Writer, io.Writer) error{"pack": runPack, "inspect": runInspect} {
		var stdout, stderr bytes.Buffer
		if err := run([]string{"-h"}, &stdout, &stderr); err != nil {
			t.Errorf("%s -h: %v", name, err)
		}
		if !strings.Contains(stderr.String(), "usage: airflow-go-worker "+name) || !strings.Contains(stderr.String(), "-format") && name == "inspect" || !strings.Contains(stderr.String(), "-executable") && name == "pack" {
			t.Errorf("%s -h printed:\n%s", name, stderr.String())
		}
	}
}

func TestPackRemovesABundleThatDoesNotStart(t *testing.T) {
	broken := "- not\n- a manifest\n"
	otherDags := strings.Replace(fakeYAML, "report:", "other:", 1)
	cases := map[string]struct {
		bundleStdout string
		want         string
	}{
		"cannot start":   {broken, "does not start"},
		"different dags": {otherDags, "declares dags [etl, other] but the executable declared [etl, report]"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "b")
			if err := os.WriteFile(out, []byte("previous bundle"), 0o755); err != nil {
				t.Fatal(err)
			}
			_, _, err := pack(t, "--executable", fakeExeAsBundle(t, fakeYAML, 0, "", &c.bundleStdout), "--output", out)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "nothing was written to "+out) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
			if b, _ := os.ReadFile(out); string(b) != "previous bundle" {
				t.Error("a bundle that cannot start replaced the previous one")
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("%d files left in the output directory, want only the previous bundle", len(entries))
			}
		})
	}
}

func TestPackRelativePaths(t *testing.T) {
	exe := fakeExe(t, fakeYAML, 0, "")
	t.Chdir(filepath.Dir(exe))
	// Bare names must run the files here, not look them up in $PATH.
	stdout, stderr, err := pack(t, "--executable", filepath.Base(exe), "--output", "out.bundle")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "out.bundle") {
		t.Errorf("output %q", stdout)
	}
	if got := inspectJSON(t, "out.bundle")["bundle"]; got != "out.bundle" {
		t.Errorf("inspect names the bundle %v", got)
	}
}

// The coordinator checks only the binary's hash: inspect also says when the
// packed source or manifest changed after packing.
func TestInspectWarnsOfAnEditedManifest(t *testing.T) {
	out := filepath.Join(t.TempDir(), "b")
	if _, _, err := pack(t, "--executable", fakeExe(t, fakeYAML, 0, ""), "--output", out); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// Edit the manifest in place (same length): the bundle stays valid.
	i := bytes.LastIndex(raw, []byte(`"1.0"`))
	if i < 0 {
		t.Fatal("no manifest version in the bundle")
	}
	copy(raw[i:], `"1.1"`)
	if err := os.WriteFile(out, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if err := runInspect([]string{out}, &bytes.Buffer{}, &stderr); err != nil {
		t.Fatalf("an edited but well-formed manifest is still a valid bundle: %v", err)
	}
	if !strings.Contains(stderr.String(), "digests.cache does not match") || !strings.Contains(stderr.String(), "pack it again") {
		t.Fatalf("no warning about the edited manifest: %q", stderr.String())
	}
}
