package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// workdir is the one temporary directory everything lives in.
type workdir struct {
	root        string
	home        string // AIRFLOW_HOME: airflow.cfg, the SQLite database, task logs
	dags        string // the Dags folder
	executables string // the coordinator's executables_root
	s3          string // versitygw's posix root
	state       string // XDG_STATE_HOME of the worker: local sandboxes would live under it
	modal       string // the fake Modal server's sandboxes (created by it)
	logs        string // one log file per process started
}

func newWorkdir() (*workdir, error) {
	root, err := os.MkdirTemp("", "airflow-e2e-")
	if err != nil {
		return nil, fmt.Errorf("creating a work directory: %w", err)
	}
	sub := func(name string) string { return filepath.Join(root, name) }
	w := &workdir{root: root, home: sub("home"), dags: sub("dags"), executables: sub("executables"),
		s3: sub("s3"), state: sub("state"), modal: sub("modal"), logs: sub("logs")}
	for _, d := range []string{w.home, w.dags, w.executables, w.s3, w.state, w.logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// sandboxRoot is where the local backend would keep its sandboxes for the
// worker's XDG_STATE_HOME (the examples run on Modal: none should be there).
func (w *workdir) sandboxRoot() string {
	return filepath.Join(w.state, "airflow-go-worker", "sandboxes")
}

// sandboxesLeft lists the local sandboxes still on disk (the backend's
// own files, such as .system, are not sandboxes).
func sandboxesLeft(w *workdir) []string { return sandboxesIn(w.state) }

// sandboxesIn lists the local sandboxes on disk for an XDG_STATE_HOME.
func sandboxesIn(state string) []string {
	entries, _ := os.ReadDir(filepath.Join(state, "airflow-go-worker", "sandboxes"))
	var names []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), sandbox.NamePrefix) {
			names = append(names, e.Name())
		}
	}
	return names
}

// packBundles packs one bundle per example into executables_root, with
// pack's default flags (which target Airflow 3.3), and copies each
// example's stub Dag, unchanged, into the Dags folder. The standard
// bundle's examples are packed with their bundle config as it is; go_tasks
// is its own binary.
func packBundles(ctx context.Context, o options, w *workdir) error {
	packed := map[string]bool{}
	for _, s := range scenarios {
		if packed[s.example] { // a second run of the same Dag
			continue
		}
		packed[s.example] = true
		exDir := filepath.Join(o.repo, s.dir())
		args := []string{"pack", "--output", filepath.Join(w.executables, s.example+".bundle")}
		what := filepath.Join(s.dir(), "bundle.yaml")
		if s.goMain {
			args = append(args, "--executable", o.goTasksBin)
			what = "its own Go main, " + filepath.Base(o.goTasksBin)
		} else {
			args = append(args, "--executable", o.workerBin, "--config", filepath.Join(exDir, "bundle.yaml"))
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
