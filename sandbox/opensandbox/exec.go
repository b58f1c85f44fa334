package opensandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	osdk "github.com/alibaba/OpenSandbox/sdks/sandbox/go"

	"github.com/airflow-sandbox/airflow-go-worker/internal/randhex"
	"github.com/airflow-sandbox/airflow-go-worker/internal/tailbuf"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// interruptTimeout bounds the DELETE /command sent when a caller gives up.
const interruptTimeout = 10 * time.Second

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// wrapCommand runs command through sh -c (execd itself uses bash), with
// stdin from stdinPath (removed once opened) or /dev/null, then prints
// "\n<marker>\n" on stdout and on stderr and exits with the command's
// status. execd sends output line by line without the newlines; the marker
// tells a final line without a newline (it arrives as text just before the
// marker) from a whole one (an empty line arrives first), so the lines and
// their newlines come back as written. Not every byte does: execd sends
// each line as a JSON string, so bytes that are not UTF-8 arrive as U+FFFD,
// and it splits lines at "\r" and "\r\n" too, so both arrive as "\n".
// Output that must survive byte for byte belongs in a file (OpenFile).
func wrapCommand(command, stdinPath, marker string) string {
	var b strings.Builder
	if stdinPath == "" {
		b.WriteString("sh -c " + shellQuote(command) + " </dev/null")
	} else {
		q := shellQuote(stdinPath)
		b.WriteString("exec <" + q + "; rm -f " + q + "; sh -c " + shellQuote(command))
	}
	b.WriteString("; __rc=$?; printf '\\n%s\\n' " + marker + "; printf '\\n%s\\n' " + marker + " >&2; exit $__rc")
	return b.String()
}

// execdTokenVar is where execd reads its access token from when it is not
// given as a flag; commands inherit execd's whole environment.
const execdTokenVar = "EXECD_ACCESS_TOKEN"

// hideExecdEnv starts a command by removing execd's access token from its
// environment: a command that could read it could reach execd from
// anywhere the token is accepted. A caller that maps the variable itself
// (env) keeps it.
func hideExecdEnv(env map[string]string) string {
	if _, mapped := env[execdTokenVar]; mapped {
		return ""
	}
	return "unset " + execdTokenVar + "; "
}

// outputStream rebuilds one output stream from execd's line events. Each
// line's text is written at once; its newline is owed until the next event
// shows whether the line had one: the last line before the marker is
// either the wrapper's own empty line or a final line without a newline,
// and neither newline is real. So that a line followed by a long silence
// still reaches line-based log readers, an owed newline is written after
// newlineDelay of quiet; execd sends a final partial line right before the
// marker (the wrapper completes it with its own newline), so the delay
// only matters if those two events arrive further apart than that.
type outputStream struct {
	w     io.Writer
	delay time.Duration

	mu     sync.Mutex
	owed   bool // a newline for the last line is not written yet
	ended  bool // the marker came: later lines are from background processes
	closed bool
	timer  *time.Timer
	err    error
}

// newlineDelay is how long an owed newline waits for the next event.
const newlineDelay = 2 * time.Second

func newOutputStream(w io.Writer) *outputStream {
	if w == nil {
		w = io.Discard
	}
	return &outputStream{w: w, delay: newlineDelay}
}

func (o *outputStream) write(s string) {
	if o.err == nil && s != "" {
		_, o.err = io.WriteString(o.w, s)
	}
}

func (o *outputStream) line(text string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ended {
		o.write(OutputLine(text))
		return o.err
	}
	if o.owed {
		o.write("\n")
	}
	if text != "\n" { // "\n" is an empty line: only its newline is owed
		o.write(text)
	}
	o.owed = true
	if o.timer == nil {
		o.timer = time.AfterFunc(o.delay, o.payNewline)
	} else {
		o.timer.Reset(o.delay)
	}
	return o.err
}

func (o *outputStream) payNewline() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.owed && !o.ended && !o.closed {
		o.write("\n")
		o.owed = false
	}
}

// marker ends the stream exactly: the owed newline was the wrapper's.
func (o *outputStream) marker() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.owed, o.ended = false, true
	if o.timer != nil {
		o.timer.Stop()
	}
	return o.err
}

// close is finish where the stream's end is already an error of its own,
// which a failed write must not hide.
func (o *outputStream) close() { _ = o.finish() }

// finish pays an owed newline when no marker came (the command was
// killed): the guess OutputLine describes. Nothing is written after it.
func (o *outputStream) finish() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.timer != nil {
		o.timer.Stop()
	}
	if o.owed && !o.ended && !o.closed {
		o.write("\n")
	}
	o.owed, o.closed = false, true
	return o.err
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
	wd = tags[driver.TagWorkdir]
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
func (d *Driver) Exec(ctx context.Context, id string, req driver.ExecRequest) (driver.ExecResult, error) {
	start := time.Now()
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = driver.DefaultExecTimeout
	}
	res := driver.ExecResult{AppliedTimeout: timeout}
	ex, cwd, stdinPath, err := d.prepareExec(ctx, id, req)
	if err != nil {
		return res, err
	}
	stdout, stderr := newOutputStream(req.Stdout), newOutputStream(req.Stderr)
	defer stdout.close()
	defer stderr.close()

	// execd enforces the timeout; the wall deadline only catches a server
	// that stops reporting.
	wall, cancel := context.WithTimeout(ctx, timeout+execGrace)
	defer cancel()
	run := commandRun{stdout: stdout, stderr: stderr, marker: "__airflow_end_" + randhex.String(8) + "__"}
	err = run.stream(wall, ex, osdk.RunCommandRequest{
		Command: hideExecdEnv(req.Env) + wrapCommand(req.Command, stdinPath, run.marker),
		Cwd:     cwd,
		Timeout: max(1, timeout.Milliseconds()), // 0 would mean no timeout at all
		Envs:    req.Env,
	})
	res.Duration = time.Since(start)
	interrupt := func() {
		if run.cmdID == "" {
			return
		}
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), interruptTimeout)
		defer cancel()
		if err := ex.interrupt(ictx, run.cmdID); err != nil {
			d.log.Warn("could not interrupt a command; it may keep running until its timeout", "id", id, "command_id", run.cmdID, "error", err)
		}
	}
	var api *osdk.APIError
	switch {
	case run.final != nil:
		return d.execEnded(ctx, id, res, *run.final, stdout, stderr)
	case run.output != nil:
		interrupt()
		return res, fail("exec", id, "", nil, run.output)
	case err != nil && run.cmdID == "" && (!run.answered.Load() || errors.As(err, &api)):
		d.dropStdin(ctx, ex, id, stdinPath)
		if ctx.Err() != nil {
			return res, fail("exec", id, "", nil, ctx.Err())
		}
		return res, d.execStartError(ctx, id, callError("run command", err))
	}
	stdout.close()
	stderr.close()
	if err == nil {
		err = io.ErrUnexpectedEOF // closed without a terminal event
	}
	return d.streamEnded(ctx, wall, id, res, err, interrupt)
}

// prepareExec finds the sandbox's execd and the command's working
// directory, and uploads its stdin (to a file the command removes once it
// has opened it).
func (d *Driver) prepareExec(ctx context.Context, id string, req driver.ExecRequest) (ex *execd, cwd, stdinPath string, err error) {
	if ex, err = d.execdFor(ctx, id); err != nil {
		return nil, "", "", err
	}
	cwd = req.Workdir
	if cwd == "" {
		if cwd, err = d.workdirOf(ctx, id); err != nil {
			return nil, "", "", err
		}
	}
	if req.Stdin != nil {
		stdinPath = "/tmp/.airflow-stdin-" + randhex.String(8)
		if err := ex.upload(ctx, stdinPath, req.Stdin, 0o600); err != nil {
			return nil, "", "", d.fileError(ctx, "exec", id, stdinPath, err)
		}
	}
	return ex, cwd, stdinPath, nil
}

// dropStdin removes the stdin file of a command that never ran to remove
// it: the input (which may be sensitive) must not lie in the sandbox's /tmp.
func (d *Driver) dropStdin(ctx context.Context, ex *execd, id, stdinPath string) {
	if stdinPath == "" {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := ex.deleteFile(dctx, stdinPath); err != nil {
		d.log.Warn("could not remove the stdin file of a command that did not start", "id", id, "path", stdinPath, "error", err)
	}
}

// commandRun is what one command's stream brought: its id, its terminal
// event, a failure to pass its output on, and whether execd answered at
// all (which tells a command that never started from a stream that
// broke).
type commandRun struct {
	stdout, stderr *outputStream
	marker         string
	cmdID          string
	final          *event
	output         error
	answered       atomic.Bool
}

// stream runs the command and reads its events until the terminal one:
// the result does not wait for the stream to close, as execd keeps it
// open a while after the end.
func (c *commandRun) stream(ctx context.Context, ex *execd, req osdk.RunCommandRequest) error {
	sctx := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotFirstResponseByte: func() { c.answered.Store(true) }})
	return ex.c.RunCommand(sctx, req, func(se osdk.StreamEvent) error {
		evs, err := decodeEvents(se.Data)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			if stop := c.handle(ev); stop {
				return errStopStream
			}
		}
		return nil
	})
}

// handle takes one event; true stops reading the stream.
func (c *commandRun) handle(ev event) bool {
	switch ev.Type {
	case eventInit:
		c.cmdID = ev.Text
	case eventStdout, eventStderr:
		o := c.stdout
		if ev.Type == eventStderr {
			o = c.stderr
		}
		var err error
		if ev.Text == c.marker {
			err = o.marker()
		} else {
			err = o.line(ev.Text)
		}
		if err != nil {
			c.output = fmt.Errorf("writing the command's %s: %w", ev.Type, err)
			return true
		}
	case eventComplete, eventError:
		c.final = &ev
		return true
	}
	return false
}

// errStopStream ends reading a command stream from the event handler.
var errStopStream = errors.New("stop reading the stream")

// execEnded reads how a command ended from its terminal event.
func (d *Driver) execEnded(ctx context.Context, id string, res driver.ExecResult, ev event, stdout, stderr *outputStream) (driver.ExecResult, error) {
	if err := errors.Join(stdout.finish(), stderr.finish()); err != nil {
		return res, fail("exec", id, "", nil, fmt.Errorf("writing the command's output: %w", err))
	}
	code, ok := ev.exitCode()
	if !ok {
		msg := "no detail"
		if ev.Error != nil {
			msg = ev.Error.Name + ": " + ev.Error.Value
		}
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: fmt.Errorf("the command could not be started (%s); check the command and the workdir", msg)}
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

// streamEnded explains a stream that stopped before its terminal event.
func (d *Driver) streamEnded(ctx, wall context.Context, id string, res driver.ExecResult, cause error, interrupt func()) (driver.ExecResult, error) {
	switch {
	case ctx.Err() != nil:
		interrupt()
		return res, fail("exec", id, "", nil, fmt.Errorf("the task was stopped; the command was interrupted: %w", ctx.Err()))
	case errors.Is(cause, ErrEventTooLarge):
		interrupt()
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: fmt.Errorf("the command printed a line longer than %d MiB, which is not streamed; the command was interrupted; write such output to a file and read that instead", MaxEventBytes>>20)}
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
	if _, err := d.record(rctx, "exec", id); errors.Is(err, driver.ErrGone) {
		res.SandboxLost = true
		return res, &driver.Error{Op: "exec", Sandbox: id, Kind: driver.ErrGone,
			Err: fmt.Errorf("the sandbox disappeared while the command ran (expired or destroyed): %v", err)}
	}
	interrupt()
	return res, driver.Retryable(&driver.Error{Op: "exec", Sandbox: id, Err: fmt.Errorf("the command's output stream broke before it finished (%v); the command was interrupted, its outcome is unknown; retry it", cause)})
}

// execStartError maps a failed POST /command.
func (d *Driver) execStartError(ctx context.Context, id string, err error) error {
	var api *APIError
	if errors.As(err, &api) {
		if api.NotFound() {
			if _, gerr := d.record(ctx, "exec", id); errors.Is(gerr, driver.ErrGone) {
				return gerr
			}
		}
		if api.Status == 400 {
			return &driver.Error{Op: "exec", Sandbox: id, Err: fmt.Errorf("%w; check that the workdir exists", err)}
		}
	}
	if gone := d.goneInstead(ctx, "exec", id, err); gone != nil {
		return gone
	}
	return fail("exec", id, "", nil, err)
}

// cmdResult is how a helper command ended.
type cmdResult struct {
	stdout, stderr string
	code           int
}

// run executes a short helper command in the sandbox (from /) and returns
// its output.
func (d *Driver) run(ctx context.Context, id, command string) (cmdResult, error) {
	var out bytes.Buffer
	errOut := tailbuf.New(2048)
	res, err := d.Exec(ctx, id, driver.ExecRequest{Command: command, Timeout: time.Minute, Workdir: "/", Stdout: &out, Stderr: errOut})
	if err != nil {
		return cmdResult{}, err
	}
	if res.TimedOut {
		return cmdResult{}, fmt.Errorf("%q timed out", command)
	}
	return cmdResult{stdout: out.String(), stderr: errOut.String(), code: res.ExitCode}, nil
}

// Event types execd sends on a command stream.
const (
	eventInit     = "init"
	eventStdout   = "stdout"
	eventStderr   = "stderr"
	eventComplete = "execution_complete"
	eventError    = "error"
)

// event is one execd stream event, as the SDK hands over its JSON.
type event struct {
	Type  string       `json:"type"`
	Text  string       `json:"text,omitempty"`
	Error *errorDetail `json:"error,omitempty"`
}

// errorDetail is the error object of an "error" event.
type errorDetail struct {
	Name  string `json:"ename"`
	Value string `json:"evalue"`
}

// decodeEvents reads the events of one SDK stream event: execd writes each
// as a bare JSON object followed by a blank line; objects back to back
// without one arrive joined in one data field.
func decodeEvents(data string) ([]event, error) {
	if len(data) > MaxEventBytes {
		return nil, ErrEventTooLarge // cut by lineBound (guard.go)
	}
	dec := json.NewDecoder(strings.NewReader(data))
	var out []event
	for {
		var ev event
		err := dec.Decode(&ev)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("execd stream event is not JSON: %.200q", data)
		}
		out = append(out, ev)
	}
}

// exitCode reads the exit code of a terminal event: 0 for
// execution_complete, int(evalue) for error. ok is false for non-terminal
// events and for errors whose evalue is not a number (a command that could
// not start; the message is then in evalue).
func (ev event) exitCode() (code int, ok bool) {
	switch ev.Type {
	case eventComplete:
		return 0, true
	case eventError:
		if ev.Error == nil {
			return 0, false
		}
		n, err := strconv.Atoi(strings.TrimSpace(ev.Error.Value))
		if err != nil {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// KilledExitCode is the evalue execd reports for a command killed by its
// timeout or by an interrupt.
const KilledExitCode = -1

// OutputLine turns a stdout/stderr event text back into bytes. execd strips
// the line terminator from each line and sends an empty line as "\n", so a
// newline is re-added to everything else.
//
// Approximation: execd flushes a final line that had no newline as an
// ordinary event, indistinguishable from a whole line, so on its own this
// gives such output a newline it did not have. The driver avoids that by
// printing a marker after each command (see wrapCommand); only a command
// killed before the marker falls back to the guess. A "\r" or "\r\n"
// terminator comes back as "\n" in every case.
func OutputLine(text string) string {
	if text == "\n" {
		return "\n"
	}
	return text + "\n"
}
