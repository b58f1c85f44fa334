package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildWith builds the binary with build tags (none: the default build).
func buildWith(t *testing.T, tags string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "airflow-go-worker")
	args := []string{"build", "-o", out}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	if b, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", args, err, b)
	}
	return out
}

// runBin runs a built binary as a user would (cli runs the test binary
// itself).
func runBin(t *testing.T, bin string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "AIRFLOW__LOGGING__LOGGING_LEVEL=INFO")
	return runCommand(t, cmd)
}

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bundle.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const (
	modalConfig = "dags: {d: {tasks: {t: {kind: provision, defaults: {backend: modal}}}}}\n"
	gcsConfig   = "dags: {d: {tasks: {t: {kind: export, defaults: {sandbox: sb-1, exports: {out.txt: 'gs://b/out.txt'}}}}}}\n"
	s3Config    = "dags: {d: {tasks: {t: {kind: export, defaults: {sandbox: sb-1, exports: {out.txt: 's3://b/out.txt'}}}}}}\n"
	// A run may choose the backend and the stage-ins: what the binary
	// lacks is refused when the task runs, before anything is created.
	confConfig = "dags: {d: {tasks: {t: {kind: provision, conf: [backend, stage_in]}}}}\n"
)

// The default build links the local backend and file:// only; a
// config naming anything else is refused by --airflow-metadata, pack,
// inspect and the task itself, with the build command that adds it.
func TestDefaultBuildRefusesWhatItDoesNotLink(t *testing.T) {
	def := buildWith(t, "")
	full := buildWith(t, allExtrasTag)

	if r := runBin(t, def, "version"); !strings.Contains(r.stdout, "links backends: local; stores: file\n") {
		t.Fatalf("default build's version: %q", r.stdout)
	}
	if r := runBin(t, full, "version"); !strings.Contains(r.stdout, "links backends: local, modal, opensandbox; stores: az, file, gs, s3\n") {
		t.Fatalf("full build's version: %q", r.stdout)
	}

	modalHint := []string{`backend "modal" is not linked into this binary (it links local)`, "make build EXTRAS=modal", "CGO_ENABLED=0 go build -trimpath -tags backend_modal ./cmd/airflow-go-worker"}
	gcsHint := []string{"exports.out.txt: gs:// URLs need the gcs store, which is not linked into this binary (it links file)", "make build EXTRAS=gcs", "CGO_ENABLED=0 go build -trimpath -tags store_gcs ./cmd/airflow-go-worker"}
	// S3 is an extra too: the AWS SDK's credential chain costs every task
	// start its inits.
	s3Hint := []string{"exports.out.txt: s3:// URLs need the s3 store, which is not linked into this binary (it links file)", "make build EXTRAS=s3", "CGO_ENABLED=0 go build -trimpath -tags store_s3 ./cmd/airflow-go-worker"}
	check := func(what string, r cliResult, code int, want []string) {
		t.Helper()
		if r.code != code {
			t.Errorf("%s: exit %d, want %d\nstdout %s\nstderr %s", what, r.code, code, r.stdout, r.stderr)
		}
		for _, w := range want {
			// The task log quotes the error as a logfmt value.
			if !strings.Contains(strings.ReplaceAll(r.stderr+r.stdout, `\"`, `"`), w) {
				t.Errorf("%s: output lacks %q:\n%s%s", what, w, r.stdout, r.stderr)
			}
		}
	}
	modal, gcs, s3 := writeConfig(t, modalConfig), writeConfig(t, gcsConfig), writeConfig(t, s3Config)
	check("--airflow-metadata modal", runBin(t, def, "--airflow-metadata", "--bundle-config", modal), 2, append([]string{"dags.d.tasks.t.defaults"}, modalHint...))
	check("--airflow-metadata gs://", runBin(t, def, "--airflow-metadata", "--bundle-config", gcs), 2, append([]string{"dags.d.tasks.t.defaults"}, gcsHint...))
	check("--airflow-metadata s3://", runBin(t, def, "--airflow-metadata", "--bundle-config", s3), 2, append([]string{"dags.d.tasks.t.defaults"}, s3Hint...))
	out := filepath.Join(t.TempDir(), "x.bundle")
	check("pack modal", runBin(t, def, "pack", "--executable", def, "--config", modal, "--output", out), 1, modalHint)
	check("pack gs://", runBin(t, def, "pack", "--executable", def, "--config", gcs, "--output", out), 1, gcsHint)
	check("pack s3://", runBin(t, def, "pack", "--executable", def, "--config", s3, "--output", out), 1, s3Hint)
	if _, err := os.Stat(out); err == nil {
		t.Error("a refused pack left a bundle behind")
	}

	// A bundle the full build packed is refused by the default build's
	// inspect, which loads the config as it would run it.
	packed := filepath.Join(t.TempDir(), "modal.bundle")
	check("full pack modal", runBin(t, full, "pack", "--executable", full, "--config", modal, "--output", packed), 0, nil)
	check("inspect modal", runBin(t, def, "inspect", packed), 1, append([]string{"loaded as this binary would run it"}, modalHint...))
	r := runBin(t, full, "inspect", packed)
	check("full inspect modal", r, 0, []string{"source_checked_with:", `"modal"`})

	// At run time: a run choosing what the binary lacks fails the task.
	conf := writeConfig(t, confConfig)
	check("run backend modal", runBin(t, def, "run", "--bundle-config", conf, "--dag", "d", "--task", "t", "--conf", `{"backend": "modal"}`), 1, append([]string{": failed"}, modalHint...))
	check("run stage_in gs://", runBin(t, def, "run", "--bundle-config", conf, "--dag", "d", "--task", "t", "--conf", `{"stage_in": {"in.txt": "gs://b/in.txt"}}`), 1,
		[]string{": failed", "in.txt: gs:// URLs need the gcs store, which is not linked into this binary", "make build EXTRAS=gcs"})
	check("run stage_in s3a://", runBin(t, def, "run", "--bundle-config", conf, "--dag", "d", "--task", "t", "--conf", `{"stage_in": {"in.txt": "s3a://b/in.txt"}}`), 1,
		[]string{": failed", "in.txt: s3a:// URLs need the s3 store, which is not linked into this binary", "make build EXTRAS=s3"})
}

// One extra's binary links it, and its hint for another keeps it: the
// command given builds a binary with both.
func TestOneExtraLinksOnlyItself(t *testing.T) {
	bin := buildWith(t, "store_s3")
	if r := runBin(t, bin, "version"); !strings.Contains(r.stdout, "links backends: local; stores: file, s3\n") {
		t.Fatalf("version: %q", r.stdout)
	}
	if r := runBin(t, bin, "--airflow-metadata", "--bundle-config", writeConfig(t, s3Config)); r.code != 0 {
		t.Fatalf("an S3 config on a binary with S3: exit %d\n%s", r.code, r.stderr)
	}
	for config, want := range map[string][]string{
		gcsConfig:   {"(it links file, s3)", `make build EXTRAS="s3 gcs"`, "CGO_ENABLED=0 go build -trimpath -tags store_s3,store_gcs ./cmd/airflow-go-worker"},
		modalConfig: {`make build EXTRAS="modal s3"`, "CGO_ENABLED=0 go build -trimpath -tags backend_modal,store_s3 ./cmd/airflow-go-worker"},
	} {
		r := runBin(t, bin, "--airflow-metadata", "--bundle-config", writeConfig(t, config))
		for _, w := range want {
			if r.code != 2 || !strings.Contains(r.stderr, w) {
				t.Errorf("exit %d, want 2 and %q in:\n%s", r.code, w, r.stderr)
			}
		}
	}
}

// Each extra is one file, named as the Makefile's EXTRAS finds it
// (backend_<option>.go, store_<option>.go), linked by its own tag and by
// all_extras; and each such file is in the table, so its hint exists.
func TestExtrasTableMatchesTheirFiles(t *testing.T) {
	files, err := filepath.Glob("*_*.go")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{"backend_local.go": true}
	for _, e := range extras {
		prefix := map[string]string{"backend": "backend_", "store": "store_"}[e.kind]
		if prefix == "" || e.tag != prefix+e.option {
			t.Errorf("extra %+v: want kind backend or store and tag %s%s", e, prefix, e.option)
		}
		name := e.tag + ".go"
		listed[name] = true
		src, err := os.ReadFile(name)
		if err != nil {
			t.Errorf("extra %s: %v", e.option, err)
			continue
		}
		if want := "//go:build " + e.tag + " || " + allExtrasTag + "\n"; !strings.HasPrefix(string(src), want) {
			t.Errorf("%s must start with %q", name, want)
		}
	}
	for _, f := range files {
		if (strings.HasPrefix(f, "backend_") || strings.HasPrefix(f, "store_")) && !strings.HasSuffix(f, "_test.go") && !listed[f] {
			t.Errorf("%s is not in the extras table (extras.go)", f)
		}
	}
}
