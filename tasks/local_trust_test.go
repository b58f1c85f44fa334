package tasks

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/local"
)

// localDeps runs tasks on the real local backend (DefaultDrivers), with its
// sandboxes under a root of the test's own.
func localDeps(t *testing.T) (Deps, *fakeAirflow, string) {
	t.Helper()
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	af := newFakeAirflow()
	d := Deps{Airflow: af, Run: Run{DagID: "dag_a", RunID: "manual__1", TaskID: "provision", MapIndex: -1}}
	return d, af, filepath.Join(state, "airflow-go-worker", "sandboxes")
}

// Hole 1, image part: a run's input "image: /usr" mounted the host's /usr as
// the sandbox's root. Image directories are the operator's to allow
// (AIRFLOW_GO_WORKER_IMAGE_ROOTS), none by default.
func TestProvisionImageDirectoryNeedsAnOperatorImageRoot(t *testing.T) {
	ctx := context.Background()
	d, af, root := localDeps(t)
	t.Setenv(ImageRootsEnv, "")
	_, err := Provision(ctx, d, ProvisionInput{Image: "/usr"})
	if err == nil || !strings.Contains(err.Error(), ImageRootsEnv) {
		t.Fatalf("image /usr without image roots: want a refusal naming %s, got %v", ImageRootsEnv, err)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Fatalf("the refused provision left %d entries under %s", len(entries), root)
	}
	if _, ok := af.xcoms[RecordXComKey]; ok {
		t.Fatal("the refused provision pushed a sandbox record")
	}

	// The operator allows a directory of images: one there is accepted,
	// /usr still is not.
	images := t.TempDir()
	img := filepath.Join(images, "rootfs")
	if err := os.Mkdir(img, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(ImageRootsEnv, "/nonexistent-image-root::"+images)
	if _, err := Provision(ctx, d, ProvisionInput{Image: "/usr"}); err == nil {
		t.Fatal("a nonexistent image root was accepted")
	}
	t.Setenv(ImageRootsEnv, ":"+images+":")
	if _, err := Provision(ctx, d, ProvisionInput{Image: "/usr"}); err == nil || !strings.Contains(err.Error(), "not under the image roots") {
		t.Fatalf("image /usr outside the image roots: want a refusal, got %v", err)
	}
	id, err := Provision(ctx, d, ProvisionInput{Image: img})
	if err != nil {
		t.Fatalf("an image under the operator's image roots: %v", err)
	}
	drv, err := local.New(local.Options{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	if err := drv.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// The operator's process limit reaches the local driver; a malformed value
// fails the task with what to write instead.
func TestLocalMaxProcessesEnv(t *testing.T) {
	ctx := context.Background()
	d, _, _ := localDeps(t)
	t.Setenv(LocalMaxProcessesEnv, "lots")
	if _, err := Provision(ctx, d, ProvisionInput{}); err == nil || !strings.Contains(err.Error(), LocalMaxProcessesEnv) {
		t.Fatalf("want an error naming %s, got %v", LocalMaxProcessesEnv, err)
	}
	t.Setenv(LocalMaxProcessesEnv, "16")
	id, err := Provision(ctx, d, ProvisionInput{})
	if err != nil {
		t.Fatal(err)
	}
	// A bounded fork bomb stops at the limit of 16.
	res, err := RunCommands(ctx, d, RunInput{Sandbox: SandboxRef{ID: id}, Command: Commands{
		`( i=0; while [ $i -lt 100 ]; do sleep 30 & i=$((i+1)); done ) 2>/dev/null; n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo "procs=$n"`}})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if _, err := fmt.Sscanf(strings.TrimSpace(res.OutputTail), "procs=%d", &n); err != nil || n > 16 || n < 8 {
		t.Fatalf("want the fork bomb stopped at 16 processes, got %q", res.OutputTail)
	}
}
