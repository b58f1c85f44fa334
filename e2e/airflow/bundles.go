package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// workdir is the one temporary directory everything lives in.
type workdir struct {
	root        string
	home        string // AIRFLOW_HOME: airflow.cfg, the SQLite database, task logs
	dags        string // the Dags folder
	executables string // the coordinator's executables_root
	configs     string // bundle configs derived for the local backend
	s3          string // versitygw's posix root
	state       string // XDG_STATE_HOME of the worker: local sandboxes live under it
	logs        string // one log file per process started
}

func newWorkdir() (*workdir, error) {
	root, err := os.MkdirTemp("", "airflow-e2e-")
	if err != nil {
		return nil, fmt.Errorf("creating a work directory: %w", err)
	}
	sub := func(name string) string { return filepath.Join(root, name) }
	w := &workdir{root: root, home: sub("home"), dags: sub("dags"), executables: sub("executables"),
		configs: sub("configs"), s3: sub("s3"), state: sub("state"), logs: sub("logs")}
	for _, d := range []string{w.home, w.dags, w.executables, w.configs, w.s3, w.state, w.logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// sandboxRoot is where the local backend keeps its sandboxes for the
// worker's XDG_STATE_HOME.
func (w *workdir) sandboxRoot() string {
	return filepath.Join(w.state, "airflow-go-worker", "sandboxes")
}

// sandboxesLeft lists the local sandboxes still on disk (the backend's
// own files, such as .system, are not sandboxes).
func sandboxesLeft(w *workdir) []string {
	entries, _ := os.ReadDir(w.sandboxRoot())
	var names []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), sandbox.NamePrefix) {
			names = append(names, e.Name())
		}
	}
	return names
}

// packBundles packs one bundle per example into executables_root and copies
// each example's stub Dag, unchanged, into the Dags folder. The standard
// bundle's examples are packed with their bundle config turned to the local
// backend (see localVariant); go_tasks is its own binary.
func packBundles(ctx context.Context, o options, w *workdir) error {
	for _, s := range scenarios {
		exDir := filepath.Join(o.repo, "examples", s.example)
		args := []string{"pack", "--output", filepath.Join(w.executables, s.example+".bundle")}
		// Default flags: pack targets Airflow 3.3 unless told otherwise.
		what := ""
		if s.goMain {
			args = append(args, "--executable", o.goTasksBin)
			what = "its own Go main, " + filepath.Base(o.goTasksBin)
		} else {
			src := filepath.Join(exDir, "bundle.yaml")
			cfg, changed, err := localVariant(src)
			if err != nil {
				return err
			}
			dst := filepath.Join(w.configs, s.example+".yaml")
			if err := os.WriteFile(dst, cfg, 0o644); err != nil {
				return err
			}
			args = append(args, "--executable", o.workerBin, "--config", dst)
			what = fmt.Sprintf("examples/%s/bundle.yaml on the local backend (%s)", s.example, strings.Join(changed, "; "))
		}
		cmd := exec.CommandContext(ctx, o.workerBin, args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("packing the %s bundle failed: %v\n%s", s.example, err, out)
		}
		info("%s.bundle: %s", s.example, what)
		dag, err := os.ReadFile(filepath.Join(exDir, "dag.py"))
		if err != nil {
			return fmt.Errorf("reading the %s stub Dag: %w", s.example, err)
		}
		if err := os.WriteFile(filepath.Join(w.dags, s.example+".py"), dag, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// localVariant returns a bundle config with every task that names a
// backend moved to the local one (bubblewrap on this machine), and the
// tasks that pick an image told to run on the host's userland instead
// (ignore_image), since the local backend pulls no images. Everything else,
// commands and storage URLs included, stays as the example has it. It also
// says what it changed, task by task.
func localVariant(path string) ([]byte, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	dags, _ := cfg["dags"].(map[string]any)
	if len(dags) == 0 {
		return nil, nil, fmt.Errorf("%s has no dags", path)
	}
	var changed []string
	for dagID, d := range dags {
		tasks, _ := d.(map[string]any)["tasks"].(map[string]any)
		for taskID, t := range tasks {
			defaults, _ := t.(map[string]any)["defaults"].(map[string]any)
			var did []string
			if b, ok := defaults["backend"]; ok && b != "local" {
				defaults["backend"] = "local"
				delete(defaults, "conn_id") // the remote backend's connection
				did = append(did, fmt.Sprintf("backend %v -> local", b))
			}
			if _, ok := defaults["image"]; ok {
				defaults["ignore_image"] = true
				did = append(did, "ignore_image")
			}
			if len(did) > 0 {
				changed = append(changed, fmt.Sprintf("%s.%s: %s", dagID, taskID, strings.Join(did, ", ")))
			}
		}
	}
	if len(changed) == 0 {
		return nil, nil, fmt.Errorf("%s names no backend in any task; the airflow e2e would not know it runs locally", path)
	}
	sort.Strings(changed)
	out, err := yaml.Marshal(cfg)
	return out, changed, err
}
