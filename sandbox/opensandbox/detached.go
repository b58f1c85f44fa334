package opensandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"

	osdk "github.com/alibaba/OpenSandbox/sdks/sandbox/go"

	"github.com/airflow-sandbox/airflow-go-worker/internal/randhex"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// Detached commands are execd's background commands (driver.Detacher,
// docs/deferral.md): POST /command with background: true starts one in a
// process group of its own, its stdout and stderr going to one file; GET
// /command/status/{id} says whether it runs and how it ended, GET
// /command/{id}/logs?cursor=N returns that file from byte N on; DELETE
// /command?id= sends the group SIGTERM (SIGKILL after about 3 s). Any
// worker's driver reaches them through the sandbox's execd, so a deferred
// task's resume polls on whichever worker it lands. execd keeps a
// command's status in memory: if execd restarts, the command is unknown
// (ErrNotFound).

var _ driver.Detacher = (*Driver)(nil)

// StartDetached starts req.Command through sh -c as an execd background
// command, with req.Env and req.Workdir, and returns execd's id for it.
func (d *Driver) StartDetached(ctx context.Context, id string, req driver.ExecRequest) (string, error) {
	ex, cwd, _, err := d.prepareExec(ctx, id, driver.ExecRequest{Workdir: req.Workdir})
	if err != nil {
		return "", err
	}
	var cmdID string
	err = ex.c.RunCommand(ctx, osdk.RunCommandRequest{
		// exec: sh replaces execd's shell, so the process group execd
		// signals is the command's own.
		Command:    hideExecdEnv(req.Env) + "exec sh -c " + shellQuote(req.Command),
		Cwd:        cwd,
		Background: true,
		Envs:       req.Env,
	}, func(se osdk.StreamEvent) error {
		evs, err := decodeEvents(se.Data)
		for _, ev := range evs {
			if ev.Type == eventInit {
				cmdID = ev.Text
			}
		}
		return err
	})
	if err != nil {
		return "", d.execStartError(ctx, id, callError("run a background command", err))
	}
	if !validCommandID(cmdID) {
		return "", &driver.Error{Op: "start detached", Sandbox: id, Err: fmt.Errorf("execd started a background command but named it %q, not an id it answers for", cmdID)}
	}
	return cmdID, nil
}

// validCommandID keeps an id from a resume state (which a Dag author could
// edit) to what execd names commands: 32 hex digits (a UUID without its
// dashes); the driver allows up to 64.
func validCommandID(id string) bool { return randhex.Is(id, 1, 64) }

// PollDetached reads the command's status, then its output from
// from.Stdout (execd keeps stdout and stderr as one stream, reported as
// Stdout; from.Stderr is unused), at most maxBytes of it. Status first:
// output read after a final status is complete.
func (d *Driver) PollDetached(ctx context.Context, id, command string, from driver.Offsets, maxBytes int64) (driver.DetachedStatus, error) {
	const op = "poll detached"
	if !validCommandID(command) {
		return driver.DetachedStatus{}, &driver.Error{Op: op, Sandbox: id, Kind: driver.ErrNotFound, Err: fmt.Errorf("%q is not an execd command id", command)}
	}
	if from.Stdout < 0 || from.Stderr < 0 {
		return driver.DetachedStatus{}, &driver.Error{Op: op, Sandbox: id, Err: fmt.Errorf("negative offsets %+v", from)}
	}
	ex, err := d.execdFor(ctx, id)
	if err != nil {
		return driver.DetachedStatus{}, err
	}
	st, err := ex.c.GetCommandStatus(ctx, command)
	if err = callError("read the status of command "+command, err); err != nil {
		return driver.DetachedStatus{}, d.detachedError(ctx, op, id, command, err)
	}
	out, err := ex.commandLogs(ctx, command, from.Stdout, maxBytes)
	if err != nil {
		return driver.DetachedStatus{}, d.detachedError(ctx, op, id, command, err)
	}
	res := driver.DetachedStatus{Running: st.Running, Stdout: out, Next: driver.Offsets{Stdout: from.Stdout + int64(len(out)), Stderr: from.Stderr}}
	if !st.Running {
		res.ExitCode = exitStatus(st)
	}
	return res, nil
}

// StopDetached interrupts the command: execd signals its process group
// and answers once the group is gone. A command that has ended is not an
// error.
func (d *Driver) StopDetached(ctx context.Context, id, command string) error {
	const op = "stop detached"
	if !validCommandID(command) {
		return &driver.Error{Op: op, Sandbox: id, Kind: driver.ErrNotFound, Err: fmt.Errorf("%q is not an execd command id", command)}
	}
	ex, err := d.execdFor(ctx, id)
	if err != nil {
		return err
	}
	if err := ex.interrupt(ctx, command); err != nil {
		return d.detachedError(ctx, op, id, command, err)
	}
	return nil
}

// commandLogs is GET /command/{id}/logs?cursor=N, of which it reads at
// most max bytes: execd sends everything from N on (the SDK's
// GetCommandLogs reads all of it), and the cursor is a byte offset, so
// the next one is N plus what was read.
func (x *execd) commandLogs(ctx context.Context, command string, cursor, max int64) ([]byte, error) {
	op := "read the output of command " + command
	u := x.base + "/command/" + url.PathEscape(command) + "/logs?cursor=" + strconv.FormatInt(cursor, 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("OpenSandbox could not %s: %w", op, err)
	}
	req.Header.Set("Accept", "text/plain")
	req.Header.Set("User-Agent", "OpenSandbox-Go-SDK/"+osdk.Version)
	for k, v := range x.headers {
		req.Header.Set(k, v)
	}
	resp, err := x.hc.Do(req)
	if err != nil {
		return nil, callError(op, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return nil, callError(op, answerError(resp))
	}
	out, err := io.ReadAll(io.LimitReader(resp.Body, max))
	if err != nil {
		return nil, callError(op, err)
	}
	return out, nil
}

// detachedError classifies a failed status, logs or interrupt call: the
// sandbox gone (ErrGone: the server proxy's SANDBOX_NOT_FOUND, or no
// answer where the lifecycle API no longer knows it), the command unknown to execd (ErrNotFound:
// status answers 404 "command not found", logs 400, an interrupt 500 "no
// such session"), or the call's own error.
func (d *Driver) detachedError(ctx context.Context, op, id, command string, err error) error {
	var api *APIError
	if errors.As(err, &api) && api.SandboxNotFound() {
		d.forget(id)
		return fail(op, id, "", driver.ErrGone, fmt.Errorf("the sandbox is gone (expired or destroyed): %w", err))
	}
	if gone := d.goneInstead(ctx, op, id, err); gone != nil {
		return gone
	}
	if errors.As(err, &api) && (strings.Contains(api.Message, "command not found") || strings.Contains(api.Message, "no such session")) {
		if _, gerr := d.record(ctx, op, id); errors.Is(gerr, driver.ErrGone) {
			return gerr
		}
		return &driver.Error{Op: op, Sandbox: id, Kind: driver.ErrNotFound, Err: fmt.Errorf("execd knows no command %s (execd restarted, or the id is not one it gave): %w", command, err)}
	}
	return fail(op, id, "", nil, err)
}

// exitStatus is how a finished background command ended: its exit code,
// or for one a signal ended (execd's exit code -1, its error "signal:
// terminated") 128 plus the signal's number, as a shell reports it.
func exitStatus(st *osdk.CommandStatusResponse) int {
	code := -1
	if st.ExitCode != nil {
		code = int(*st.ExitCode)
	}
	if code != -1 {
		return code
	}
	if name, ok := strings.CutPrefix(st.Error, "signal: "); ok {
		for sig := syscall.Signal(1); sig < 65; sig++ {
			if sig.String() == name {
				return 128 + int(sig)
			}
		}
	}
	return code
}
