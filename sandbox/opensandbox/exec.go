package opensandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// interruptTimeout bounds the DELETE /command sent when a caller gives up.
const interruptTimeout = 10 * time.Second

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// wrapCommand runs command through sh -c (execd itself uses bash), with
// stdin from stdinPath (removed once opened) or /dev/null.
func wrapCommand(command, stdinPath string) string {
	if stdinPath == "" {
		return "exec sh -c " + shellQuote(command) + " </dev/null"
	}
	q := shellQuote(stdinPath)
	return "exec <" + q + "; rm -f " + q + "; exec sh -c " + shellQuote(command)
}

// workdirOf is the sandbox's workdir, from the cache or its tags.
func (d *Driver) workdirOf(ctx context.Context, id string) (string, error) {
	d.mu.Lock()
	wd, ok := d.workdir[id]
	d.mu.Unlock()
	if ok {
		return wd, nil
	}
	tags, err := d.Tags(ctx, id)
	if err != nil {
		return "", err
	}
	wd = tags[sandbox.TagWorkdir]
	d.mu.Lock()
	d.workdir[id] = wd
	d.mu.Unlock()
	return wd, nil
}

// Exec runs the command through execd and streams its output line by line
// (see OutputLine for how newlines are restored). A command killed by its
// timeout is TimedOut and the sandbox lives on; a sandbox that disappears
// during the command is SandboxLost with an ErrGone error; when ctx ends
// the command is interrupted, not left running.
func (d *Driver) Exec(ctx context.Context, id string, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	start := time.Now()
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = sandbox.DefaultExecTimeout
	}
	res := sandbox.ExecResult{AppliedTimeout: timeout}
	ex, err := d.execdFor(ctx, id)
	if err != nil {
		return res, err
	}
	cwd := req.Workdir
	if cwd == "" {
		if cwd, err = d.workdirOf(ctx, id); err != nil {
			return res, err
		}
	}
	stdinPath := ""
	if req.Stdin != nil {
		stdinPath = "/tmp/.airflow-stdin-" + sandbox.RandomHex(8)
		if err := ex.Upload(ctx, stdinPath, req.Stdin, 0o600); err != nil {
			return res, d.fileError(ctx, "exec", id, stdinPath, err)
		}
	}
	stdout, stderr := req.Stdout, req.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}

	// execd enforces the timeout; the wall deadline only catches a server
	// that stops reporting.
	wall, cancel := context.WithTimeout(ctx, timeout+execGrace)
	defer cancel()
	body, err := ex.StartCommand(wall, CommandRequest{
		Command:   wrapCommand(req.Command, stdinPath),
		Cwd:       cwd,
		TimeoutMS: timeout.Milliseconds(),
		Envs:      req.Env,
	})
	if err != nil {
		if ctx.Err() != nil {
			return res, fail("exec", id, "", nil, ctx.Err())
		}
		return res, d.execStartError(ctx, id, err)
	}
	defer body.Close()

	cmdID := ""
	interrupt := func() {
		if cmdID == "" {
			return
		}
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), interruptTimeout)
		defer cancel()
		if err := ex.Interrupt(ictx, cmdID); err != nil {
			d.log.Warn("could not interrupt a command; it may keep running until its timeout", "id", id, "command_id", cmdID, "error", err)
		}
	}
	rd := NewEventReader(body)
	for {
		ev, err := rd.Next()
		if err != nil {
			res.Duration = time.Since(start)
			return d.streamEnded(ctx, wall, id, res, err, interrupt)
		}
		switch ev.Type {
		case EventInit:
			cmdID = ev.Text
		case EventStdout, EventStderr:
			w := stdout
			if ev.Type == EventStderr {
				w = stderr
			}
			if _, err := io.WriteString(w, OutputLine(ev.Text)); err != nil {
				interrupt()
				return res, fail("exec", id, "", nil, fmt.Errorf("writing the command's %s: %w", ev.Type, err))
			}
		case EventComplete, EventError:
			res.Duration = time.Since(start)
			code, ok := ev.ExitCode()
			if !ok {
				msg := "no detail"
				if ev.Error != nil {
					msg = ev.Error.Name + ": " + ev.Error.Value
				}
				return res, &sandbox.Error{Op: "exec", Sandbox: id, Err: fmt.Errorf("the command could not be started (%s); check the command and the workdir", msg)}
			}
			if code == KilledExitCode {
				if ctx.Err() != nil {
					return res, fail("exec", id, "", nil, ctx.Err())
				}
				res.TimedOut = true
				res.ExitCode = -1
				return res, nil
			}
			res.ExitCode = code
			return res, nil
		}
	}
}

// streamEnded explains a stream that stopped before its terminal event.
func (d *Driver) streamEnded(ctx, wall context.Context, id string, res sandbox.ExecResult, cause error, interrupt func()) (sandbox.ExecResult, error) {
	switch {
	case ctx.Err() != nil:
		interrupt()
		return res, fail("exec", id, "", nil, fmt.Errorf("the task was stopped; the command was interrupted: %w", ctx.Err()))
	case wall.Err() != nil:
		interrupt()
		d.log.Warn("execd did not report the end of a command after its timeout; treating it as timed out", "id", id)
		res.TimedOut = true
		res.ExitCode = -1
		return res, nil
	}
	// Did the sandbox go away, or only the connection?
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if _, err := d.record(rctx, "exec", id); errors.Is(err, sandbox.ErrGone) {
		res.SandboxLost = true
		return res, &sandbox.Error{Op: "exec", Sandbox: id, Kind: sandbox.ErrGone,
			Err: fmt.Errorf("the sandbox disappeared while the command ran (expired or destroyed): %v", err)}
	}
	interrupt()
	return res, &sandbox.Error{Op: "exec", Sandbox: id, Retryable: true,
		Err: fmt.Errorf("the command's output stream broke before it finished (%v); the command was interrupted, its outcome is unknown; retry it", cause)}
}

// execStartError maps a failed POST /command.
func (d *Driver) execStartError(ctx context.Context, id string, err error) error {
	var api *APIError
	if errors.As(err, &api) {
		if api.NotFound() {
			if _, gerr := d.record(ctx, "exec", id); errors.Is(gerr, sandbox.ErrGone) {
				return gerr
			}
		}
		if api.Status == 400 {
			return &sandbox.Error{Op: "exec", Sandbox: id, Err: fmt.Errorf("%w; check that the workdir exists", err)}
		}
	} else {
		d.forget(id) // the endpoint may have moved; look it up again next time
	}
	return fail("exec", id, "", nil, err)
}

// run executes a short helper command and returns its stdout.
func (d *Driver) run(ctx context.Context, id, command string) (string, int, error) {
	var out bytes.Buffer
	res, err := d.Exec(ctx, id, sandbox.ExecRequest{Command: command, Timeout: time.Minute, Workdir: "/", Stdout: &out, Stderr: io.Discard})
	if err != nil {
		return "", 0, err
	}
	if res.TimedOut {
		return "", 0, fmt.Errorf("%q timed out", command)
	}
	return out.String(), res.ExitCode, nil
}
