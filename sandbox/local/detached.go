package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// A local sandbox lives on one worker host, and each of its commands ends
// with the process that started it (its bwrap dies with its parent). A
// deferred task's command must outlive the task process, and its resume
// must land on the same host: the operator says so with
// SameHostResumesEnv, and then LaunchDetached starts a keeper, the
// worker's own binary in a session of its own, which runs the command
// and exits when it ends (or when the sandbox is destroyed).

// SameHostResumesEnv, set to 1 by the worker's operator, says a deferred
// task's resumes run on the host that started it (one worker host, or a
// queue per host), so local sandboxes may take deferrable tasks.
const SameHostResumesEnv = "AIRFLOW_GO_WORKER_LOCAL_SAME_HOST_RESUMES"

const (
	keeperArg = "__airflow_go_worker_local_detached__"
	keeperEnv = "AIRFLOW_GO_WORKER_LOCAL_KEEPER"
	// keeperWatch is how often a keeper checks that its sandbox exists.
	keeperWatch = 2 * time.Second
)

func init() {
	if len(os.Args) == 2 && os.Args[1] == keeperArg && os.Getenv(keeperEnv) == "1" {
		os.Exit(runKeeper(os.Stdin, os.Stdout))
	}
}

// DeferralRefusal is why a deferred task may not use a local sandbox, nil
// when the operator set SameHostResumesEnv.
func (d *Driver) DeferralRefusal() error {
	if os.Getenv(SameHostResumesEnv) == "1" {
		return nil
	}
	return fmt.Errorf("the local backend cannot take deferrable tasks: a local sandbox lives on the worker host that created it, and Airflow may resume a deferred task on another worker; set deferrable: false, use a remote backend (modal, opensandbox), or, if every resume runs on this host (one worker host, or a queue per host), have the operator set %s=1", SameHostResumesEnv)
}

// keeperRequest is what LaunchDetached hands its keeper, on its stdin (the
// environment may hold secrets: never in argv).
type keeperRequest struct {
	Options Options
	ID      string
	Command string
	Env     map[string]string
	Workdir string
}

// LaunchDetached runs req in sandbox id from a keeper process that
// outlives the caller, and returns once the keeper has started it.
func (d *Driver) LaunchDetached(ctx context.Context, id string, req driver.ExecRequest) error {
	if err := d.DeferralRefusal(); err != nil {
		return driver.Refused("%v", err)
	}
	if _, _, err := d.liveMeta("launch detached", id); err != nil {
		return err
	}
	opts := d.opts
	opts.Logger = nil
	data, err := json.Marshal(keeperRequest{Options: opts, ID: id, Command: req.Command, Env: req.Env, Workdir: req.Workdir})
	if err != nil {
		return err
	}
	cmd := exec.Command("/proc/self/exe", keeperArg)
	cmd.Env = append(os.Environ(), keeperEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the keeper of a detached command: %w", err)
	}
	_, werr := stdin.Write(data)
	stdin.Close()
	ready := make([]byte, 8)
	n, _ := io.ReadFull(stdout, ready)
	if werr != nil || string(ready[:n]) != "started\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("the keeper of a detached command did not start it (the worker's log has its error)")
	}
	// The keeper runs on alone; reap it in the background while this
	// process lives (once it exits, init or the subreaper does).
	go func() { _ = cmd.Wait() }()
	return nil
}

// runKeeper runs one detached command for LaunchDetached.
func runKeeper(in io.Reader, out io.WriteCloser) int {
	var req keeperRequest
	if err := json.NewDecoder(in).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "keeper: reading the request:", err)
		return 2
	}
	d, err := New(req.Options)
	if err != nil {
		fmt.Fprintln(os.Stderr, "keeper:", err)
		return 2
	}
	defer func() { _ = d.Close() }()
	info, err := d.Info(context.Background(), req.ID)
	if err != nil {
		fmt.Fprintln(os.Stderr, "keeper:", err)
		return 2
	}
	timeout := driver.MaxLifetime
	if !info.ExpiresAt.IsZero() {
		timeout = max(time.Until(info.ExpiresAt), time.Second)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := d.Exec(ctx, req.ID, driver.ExecRequest{Command: req.Command, Env: req.Env, Workdir: req.Workdir, Timeout: timeout, Stdout: io.Discard, Stderr: io.Discard})
		done <- err
	}()
	fmt.Fprint(out, "started\n")
	_ = out.Close() // the launcher reads until EOF
	tick := time.NewTicker(keeperWatch)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				// The command's own exit code is in its files; this is the
				// exec failing, which the keeper's stderr records.
				fmt.Fprintln(os.Stderr, "keeper: running the command:", err)
				return 1
			}
			return 0
		case <-tick.C:
			if _, err := d.Info(ctx, req.ID); errors.Is(err, driver.ErrGone) {
				cancel() // destroyed: stop its command
			}
		}
	}
}
