package tasks

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/local"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/registry"
)

// localDeps runs tasks on the real local backend (the registered backends), with its
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
	t.Setenv(local.ImageRootsEnv, "")
	_, err := Provision(ctx, d, ProvisionInput{Image: "/usr"})
	if err == nil || !strings.Contains(err.Error(), local.ImageRootsEnv) {
		t.Fatalf("image /usr without image roots: want a refusal naming %s, got %v", local.ImageRootsEnv, err)
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
	t.Setenv(local.ImageRootsEnv, "/nonexistent-image-root::"+images)
	if _, err := Provision(ctx, d, ProvisionInput{Image: "/usr"}); err == nil {
		t.Fatal("a nonexistent image root was accepted")
	}
	t.Setenv(local.ImageRootsEnv, ":"+images+":")
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
	t.Setenv(local.MaxProcessesEnv, "lots")
	if _, err := Provision(ctx, d, ProvisionInput{}); err == nil || !strings.Contains(err.Error(), local.MaxProcessesEnv) {
		t.Fatalf("want an error naming %s, got %v", local.MaxProcessesEnv, err)
	}
	t.Setenv(local.MaxProcessesEnv, "16")
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

// announcingDriver tells the parent test when the sandbox exists, then
// blocks before Create returns: the window in which a killed provision
// leaks a sandbox whose id never reached XCom.
type announcingDriver struct{ driver.Driver }

func (a announcingDriver) Create(ctx context.Context, name string, spec sandbox.Spec) (sandbox.Info, error) {
	info, err := a.Driver.Create(ctx, name, spec)
	if err != nil {
		return info, err
	}
	fmt.Println("created")
	io.Copy(io.Discard, os.Stdin) // until killed
	return info, errors.New("the parent test never lets this return")
}

const killedProvisionEnv = "TASKS_TEST_KILLED_PROVISION"

// TestKilledProvisionHelper is the provision process the test below kills;
// without killedProvisionEnv it has nothing to do.
func TestKilledProvisionHelper(t *testing.T) {
	if os.Getenv(killedProvisionEnv) == "" {
		return
	}
	d, _, _ := localDeps(t)
	t.Setenv("XDG_STATE_HOME", os.Getenv(killedProvisionEnv))
	d.Run.RunID = "killed__1"
	d.Backends = wrapBackends(registry.Default, func(drv driver.Driver) driver.Driver { return announcingDriver{drv} })
	Provision(context.Background(), d, ProvisionInput{Env: map[string]string{"TOKEN": "s3cr3t"}})
	t.Fatal("provision returned")
}

// Hole 10 (local part): a provision killed (kill -9) after the sandbox
// exists but before its id reached XCom leaks the sandbox. sweep finds it
// by its owner once the run is finished, and leaves a running run's alone.
func TestSweepFindsSandboxOfKilledProvisionByOwner(t *testing.T) {
	ctx := context.Background()
	d, _, root := localDeps(t)
	state := os.Getenv("XDG_STATE_HOME")

	c := exec.Command(os.Args[0], "-test.run=^TestKilledProvisionHelper$", "-test.count=1")
	c.Env = append(os.Environ(), killedProvisionEnv+"="+state)
	stdin, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "created\n" {
		c.Process.Kill()
		c.Wait()
		t.Fatalf("the provision process said %q, want created", line)
	}
	if err := c.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.Wait()

	// A sandbox of a run still going on.
	d.Run.RunID = "running__1"
	kept, err := Provision(ctx, d, ProvisionInput{})
	if err != nil {
		t.Fatal(err)
	}

	res, err := Sweep(ctx, d, SweepInput{FinishedRuns: []string{"dag_a/killed__1"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Found) != 1 || res.Found[0].Owner != "dag_a/killed__1" || res.Found[0].Reason != "run finished" ||
		len(res.Destroyed) != 1 || res.Destroyed[0] != res.Found[0].ID || res.Kept != 1 {
		t.Fatalf("sweep: want the killed provision's sandbox found by owner and destroyed, the running one kept; got %+v", res)
	}
	entries, _ := os.ReadDir(root)
	var names []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") { // the backend's own files (its budget lock)
			names = append(names, e.Name())
		}
	}
	if keptName, _, _ := strings.Cut(kept, "@"); len(names) != 1 || names[0] != keptName {
		t.Fatalf("left under the sandbox root: %v, want only %s", names, kept)
	}
}
