package modal

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	modal "github.com/modal-labs/modal-client/go"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// stdinChunk is how much stdin one TaskExecStdinWrite carries.
const stdinChunk = 1 << 20

// wholeSeconds rounds a budget up to Modal's whole seconds (at least 1 s),
// so a command never gets less time than it was given.
func wholeSeconds(d time.Duration) time.Duration {
	if d <= time.Second {
		return time.Second
	}
	return (d + time.Second - 1).Truncate(time.Second)
}

// process is a started command with its output being copied.
type process struct {
	cp     *modal.ContainerProcess
	copies sync.WaitGroup
	stdin  chan struct{} // closed when stdin is fully sent (or abandoned)
}

// start runs argv, retrying retryable start failures, and begins streaming
// stdin and both outputs.
func (d *Driver) start(ctx context.Context, id string, argv []string, params *modal.SandboxExecParams, stdin io.Reader, stdout, stderr io.Writer) (*process, error) {
	sb, err := d.handle(ctx, id)
	if err != nil {
		return nil, err
	}
	var cp *modal.ContainerProcess
	err = d.retry(ctx, "exec", id, func() error {
		var err error
		cp, err = sb.Exec(ctx, argv, params)
		return mapErr("exec", id, err)
	})
	if err != nil {
		return nil, err
	}
	p := &process{cp: cp, stdin: make(chan struct{})}
	if stdin == nil {
		close(p.stdin) // callers without stdin give commands /dev/null instead
	} else {
		go func() {
			defer close(p.stdin)
			// Hide WriterTo so the copy goes in bounded chunks, not one
			// message as big as the input.
			io.CopyBuffer(cp.Stdin, struct{ io.Reader }{stdin}, make([]byte, stdinChunk)) //nolint:errcheck // a command that exits early stops reading
			cp.Stdin.Close()                                                              //nolint:errcheck // EOF, so commands reading stdin end
		}()
	}
	for _, pair := range []struct {
		w io.Writer
		r io.Reader
	}{{stdout, cp.Stdout}, {stderr, cp.Stderr}} {
		if pair.w == nil {
			pair.w = io.Discard
		}
		p.copies.Add(1)
		go func(w io.Writer, r io.Reader) {
			defer p.copies.Done()
			io.Copy(w, r) //nolint:errcheck // a broken stream shows up in Wait
		}(pair.w, pair.r)
	}
	return p, nil
}

// abandon stops the output copies (closing the streams) and waits for them.
func (p *process) abandon() {
	p.cp.Stdout.Close() //nolint:errcheck
	p.cp.Stderr.Close() //nolint:errcheck
	p.copies.Wait()
}

// Exec runs req.Command through sh -c.
func (d *Driver) Exec(ctx context.Context, id string, req driver.ExecRequest) (driver.ExecResult, error) {
	if req.Timeout <= 0 { // the Sandbox type always sets it; direct callers may not
		req.Timeout = driver.DefaultExecTimeout
	}
	budget := wholeSeconds(req.Timeout)
	res := driver.ExecResult{AppliedTimeout: budget}
	begin := time.Now()
	argv := []string{"sh", "-c", req.Command}
	if req.Stdin == nil {
		// Empty stdin, as the driver contract says. Modal keeps an exec's
		// stdin open until told otherwise; redirecting here saves the
		// round trip that would close it. A bare `exec` redirect in the same
		// shell costs no second shell process.
		argv = []string{"sh", "-c", "exec </dev/null\n" + req.Command}
	}
	p, err := d.start(ctx, id, argv,
		&modal.SandboxExecParams{Workdir: req.Workdir, Env: req.Env, Timeout: budget},
		req.Stdin, req.Stdout, req.Stderr)
	if err != nil {
		if !isGone(err) && !driver.IsRetryable(err) {
			if alive, perr := d.alive(ctx, id); perr == nil && !alive {
				err = &driver.Error{Op: "exec", Sandbox: id, Kind: driver.ErrGone, Err: err}
			}
		}
		return res, err
	}

	type waited struct {
		code int
		err  error
	}
	ch := make(chan waited, 1)
	go func() {
		code, err := p.cp.Wait(ctx, nil)
		ch <- waited{code, err}
	}()
	var w waited
	select {
	case w = <-ch:
	case <-ctx.Done():
		p.abandon()
		<-ch
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: ctx.Err()}
	}
	var timeoutErr modal.ExecTimeoutError
	switch {
	case errors.As(w.err, &timeoutErr):
		res.TimedOut = true
		p.abandon() // past the deadline the SDK's readers only report the timeout
	case w.err != nil:
		p.abandon()
	default:
		p.copies.Wait() // output ends once the command has exited
	}
	res.Duration = time.Since(begin)
	if w.err == nil {
		res.ExitCode = w.code
		res.TimedOut = w.code == 137 && res.Duration >= budget
	}

	// A deadline, a signal or a lost stream may mean the sandbox itself
	// died; one cheap poll tells.
	if res.TimedOut || w.err != nil || w.code >= 128 {
		alive, perr := d.alive(context.WithoutCancel(ctx), id)
		if perr == nil && !alive {
			res.SandboxLost = true
			if w.err != nil && !res.TimedOut {
				return res, &driver.Error{Op: "exec", Sandbox: id, Kind: driver.ErrGone, Err: w.err}
			}
			return res, nil
		}
	}
	if w.err != nil && !res.TimedOut {
		return res, mapErr("exec", id, w.err)
	}
	return res, nil
}
