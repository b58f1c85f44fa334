package tasks

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// {run_id} in an export URL gives each Dag run its own key, whatever the
// run id's characters: Airflow's own (":" and "+") stay as they are, a
// custom run id's "%", "?", "#" and spaces land literally in one path
// segment, and two runs never write the same file.
func TestExportsKeyedByRunID(t *testing.T) {
	root := t.TempDir()
	for _, runID := range []string{"manual__2026-12-02T10:00:00+00:00", "scheduled__2026-12-02T10:05:00+00:00", "custom 50%?#x", "~a.b-c_d"} {
		e := realStorageEnv(t, root)
		e.deps.Run.RunID = runID
		id := provisionWithFile(t, e, "out.txt", "from "+runID, 0o644)
		urls, err := Export(context.Background(), e.deps, ExportInput{Sandbox: SandboxRef{ID: id},
			Exports: map[string]string{"out.txt": "file://" + root + "/{dag_id}/{run_id}/out.txt"}})
		if err != nil {
			t.Fatalf("run %q: %v", runID, err)
		}
		got, err := os.ReadFile(filepath.Join(root, e.deps.Run.DagID, runID, "out.txt"))
		if err != nil || string(got) != "from "+runID {
			t.Fatalf("run %q: the export is not at the run's own path (%v, %q); it went to %v", runID, err, got, urls)
		}
		// The URL it reports reads back to the same file.
		loc, err := storage.Default.Parse(urls[0])
		if err != nil || !strings.HasSuffix(loc.Key, "/"+runID+"/out.txt") {
			t.Fatalf("run %q: reported %v (%v)", runID, urls, err)
		}
	}
}

// A run id that would add a key level or climb out of the author's
// directory is refused before anything is written.
func TestRunIDThatIsNoKeySegmentIsRefused(t *testing.T) {
	root := t.TempDir()
	for _, runID := range []string{"..", "a/b", `a\b`} {
		e := realStorageEnv(t, root)
		id := provisionWithFile(t, e, "out.txt", "x", 0o644)
		e.deps.Run.RunID = runID
		_, err := Export(context.Background(), e.deps, ExportInput{Sandbox: SandboxRef{ID: id},
			Exports: map[string]string{"out.txt": "file://" + root + "/{run_id}/out.txt"}})
		if err == nil || !strings.Contains(err.Error(), "exports.out.txt: {run_id}") || !strings.Contains(err.Error(), "one segment") {
			t.Errorf("run id %q: %v", runID, err)
		}
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Fatalf("a refused export wrote %v", entries)
	}
}
