package fakeopensandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// Execd's commands, as execd built from OpenSandbox's source answers them
// (both versions alike; docs/opensandbox-execd.md):
//
//   - With Options.ExecdToken every route, /ping included, wants
//     X-EXECD-ACCESS-TOKEN and answers 401 {"error": ...} without it.
//   - Unknown routes and wrong methods: 404 text/plain "404 page not found".
//     JSON answers are "application/json; charset=utf-8", errors
//     {code, message} in execd's words.
//   - POST /command runs bash -c in its own process group (the backing
//     sandbox needs bash 5.1 or later for the fake's own wrapper). The stream is
//     bare JSON objects each followed by a blank line: init (the command
//     id), a ping, output polled every 100 ms per stream and sent one event
//     per line, then the terminal event; after it a ping and the stream
//     stays open Options.Linger (1 s). Pings come every 3 s. A timeout
//     (ms; below 0 a 400, 0 or absent none) SIGKILLs the process group:
//     error -1 "signal: killed". A client that disconnects does not stop
//     the command. Commands inherit execd's environment
//     (EXECD_ACCESS_TOKEN included with Options.ExecdTokenInEnv). Output
//     travels as JSON strings: bytes that are not UTF-8 arrive as U+FFFD.
//   - background: true: the stream is init, ping, execution_complete at
//     once; the command runs on with stdout and stderr in one buffer, read
//     with GET /command/{id}/logs?cursor=<byte offset> (the next cursor in
//     the EXECD-COMMANDS-TAIL-CURSOR header).
//   - DELETE /command?id= sends SIGTERM to the process group, polls for
//     about 3 s, then SIGKILLs it, and answers only when the whole group is
//     gone. The stream then reports the command's own end: -1 "signal:
//     terminated" when TERM killed it, its own exit status when it trapped
//     TERM and exited. A finished command or an unknown id: 500
//     RUNTIME_ERROR.
//   - GET /command/status/{id}: {id, content, running, exit_code, error,
//     started_at, finished_at}, for foreground and background commands.
//
// Not imitated: sessions, /code, /pty, /metrics/watch, uid/gid, execd's
// own logging of command text and output.

// command is one command run through POST /command.
type command struct {
	content    string
	ctl        *os.File           // write end of the wrapper's control pipe: a line asks for SIGTERM
	kill       context.CancelFunc // SIGKILLs the command's whole tree at once
	done       chan struct{}
	startedAt  time.Time
	finishedAt time.Time
	background bool
	// Set under Server.mu.
	output      []byte // a background command's stdout and stderr
	interrupted bool
	exitCode    int
	errText     string
}

// combinedOutput collects a background command's output, as execd's one
// file for both streams.
type combinedOutput struct {
	s *Server
	c *command
}

func (o *combinedOutput) Write(p []byte) (int, error) {
	o.s.mu.Lock()
	o.c.output = append(o.c.output, p...)
	o.s.mu.Unlock()
	return len(p), nil
}

func (c *command) running() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// event is one execd stream event.
type event struct {
	Type          string      `json:"type"`
	Text          string      `json:"text,omitempty"`
	ExecutionTime int64       `json:"execution_time,omitempty"`
	Timestamp     int64       `json:"timestamp"`
	Error         *eventError `json:"error,omitempty"`
}

type eventError struct {
	Name      string   `json:"ename"`
	Value     string   `json:"evalue"`
	Traceback []string `json:"traceback"`
}

// Timing of real execd.
const (
	pingEvery      = 3 * time.Second
	outputPoll     = 100 * time.Millisecond
	interruptGrace = 3 * time.Second // SIGTERM, then SIGKILL
)

// execdJSON answers as Gin's c.JSON does.
func execdJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b)
}

func execdError(w http.ResponseWriter, status int, code, msg string) {
	execdJSON(w, status, apiError{Code: code, Message: msg})
}

// unknownRoute answers as Gin does for a route or method it does not know.
func unknownRoute(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusNotFound)
	w.Write([]byte("404 page not found"))
}

func (s *Server) serveExecd(w http.ResponseWriter, r *http.Request, b *sbx, sub string) {
	if tok := s.opts.ExecdToken; tok != "" && r.Header.Get(ExecdTokenHeader) != tok {
		execdJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized: invalid or missing header " + ExecdTokenHeader})
		return
	}
	type route struct {
		name  string
		serve func(http.ResponseWriter, *http.Request, *sbx)
	}
	var rt route
	switch {
	case r.Method == http.MethodGet && sub == "/ping":
		rt = route{RoutePing, func(w http.ResponseWriter, _ *http.Request, _ *sbx) { w.WriteHeader(http.StatusOK) }}
	case r.Method == http.MethodPost && sub == "/command":
		rt = route{RouteCommand, s.runCommand}
	case r.Method == http.MethodDelete && sub == "/command":
		rt = route{RouteInterrupt, s.interrupt}
	case r.Method == http.MethodGet && strings.HasPrefix(sub, "/command/status/"):
		rt = route{RouteStatus, func(w http.ResponseWriter, _ *http.Request, b *sbx) {
			s.status(w, b, strings.TrimPrefix(sub, "/command/status/"))
		}}
	case r.Method == http.MethodGet && strings.HasPrefix(sub, "/command/") && strings.HasSuffix(sub, "/logs") && strings.Count(sub, "/") == 3:
		rt = route{RouteLogs, func(w http.ResponseWriter, r *http.Request, b *sbx) {
			s.logs(w, r, b, strings.TrimSuffix(strings.TrimPrefix(sub, "/command/"), "/logs"))
		}}
	case r.Method == http.MethodGet && sub == "/files/search":
		rt = route{RouteSearch, s.search}
	case r.Method == http.MethodPost && sub == "/files/mv":
		rt = route{RouteMove, s.move}
	case r.Method == http.MethodPost && sub == "/files/permissions":
		rt = route{RoutePermissions, s.permissions}
	case r.Method == http.MethodPost && sub == "/files/replace":
		rt = route{RouteReplace, s.replace}
	case r.Method == http.MethodGet && sub == "/metrics":
		rt = route{RouteMetrics, s.metrics}
	case r.Method == http.MethodPost && sub == "/files/upload":
		rt = route{RouteUpload, s.upload}
	case r.Method == http.MethodGet && sub == "/files/download":
		rt = route{RouteDownload, s.download}
	case r.Method == http.MethodGet && sub == "/files/info":
		rt = route{RouteInfo, s.info}
	case r.Method == http.MethodGet && sub == "/directories/list":
		rt = route{RouteListDir, s.listDir}
	case r.Method == http.MethodPost && sub == "/directories":
		rt = route{RouteMkdir, s.mkdir}
	case r.Method == http.MethodDelete && sub == "/files":
		rt = route{RouteDeleteFiles, s.deleteFiles}
	case r.Method == http.MethodDelete && sub == "/directories":
		rt = route{RouteDeleteDirs, s.deleteDirs}
	default:
		unknownRoute(w)
		return
	}
	if !s.injected(rt.name, w, r) {
		rt.serve(w, r, b)
	}
}

// outputPoller collects one output stream and hands out whole lines, as
// execd does when it tails the stream's file every 100 ms: the newline is
// dropped, \r\n and \r end lines too, an empty line is sent as "\n", and
// a final partial line only at the end.
type outputPoller struct {
	typ string
	mu  sync.Mutex
	buf []byte
}

func (p *outputPoller) Write(b []byte) (int, error) {
	p.mu.Lock()
	p.buf = append(p.buf, b...)
	p.mu.Unlock()
	return len(b), nil
}

// lines takes the whole lines buffered so far; final also takes the rest.
func (p *outputPoller) lines(final bool) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for {
		i := strings.IndexAny(string(p.buf), "\r\n")
		if i < 0 {
			break
		}
		skip := 1
		if p.buf[i] == '\r' {
			if i+1 == len(p.buf) && !final {
				break // this \r may start a \r\n
			}
			if i+1 < len(p.buf) && p.buf[i+1] == '\n' {
				skip = 2
			}
		}
		line := string(p.buf[:i])
		p.buf = p.buf[i+skip:]
		if line == "" {
			line = "\n"
		}
		out = append(out, line)
	}
	if final && len(p.buf) > 0 {
		out = append(out, string(p.buf))
		p.buf = nil
	}
	return out
}

// interruptible runs the command in $FAKE_EXECD_COMMAND with bash -c in
// its own session and process group, and waits for it. A line on fd 0 asks
// for an interrupt as execd's DELETE /command does it: SIGTERM to the
// group, polling for up to 3 s until the whole group (not only its leader)
// is gone, then SIGKILL; the leader's status is the command's. The line is
// read by a helper that signals the wrapper (USR1), whose wait then
// returns. The command gets /dev/null as stdin and an environment without
// the variable.
var interruptible = "exec bash -c " + quote(`cmd=$FAKE_EXECD_COMMAND; unset FAKE_EXECD_COMMAND
exec 3<&0 </dev/null
interrupted= signalled=
trap 'interrupted=1' USR1
setsid bash -c "$cmd" &
pid=$!
me=$$
(trap - USR1; read -r _ <&3 && kill -USR1 $me) >/dev/null 2>&1 &
disown $!
until wait $pid 2>/dev/null; rc=$?; [ -z "$interrupted" ] || [ -n "$signalled" ] || ! kill -0 $pid 2>/dev/null; do
  signalled=1
  kill -TERM -$pid 2>/dev/null
  for ((n = 0; n < 30; n++)); do kill -0 -$pid 2>/dev/null || break; sleep 0.1; done
  kill -KILL -$pid 2>/dev/null
done
exit $rc`)

// commandRequest is POST /command's body.
type commandRequest struct {
	Command    string            `json:"command"`
	Cwd        string            `json:"cwd"`
	Background bool              `json:"background"`
	Timeout    *int64            `json:"timeout"`
	Envs       map[string]string `json:"envs"`
	Uid        *uint32           `json:"uid"`
	Gid        *uint32           `json:"gid"`
}

// runCommand is POST /command: the request checked as execd checks it,
// the command started (in the background or streaming its output), and
// its events sent as execd sends them.
func (s *Server) runCommand(w http.ResponseWriter, r *http.Request, b *sbx) {
	req, ok := decodeCommand(w, r)
	if !ok {
		return
	}
	cwd, ok := s.commandCwd(w, r, b, req.Cwd)
	if !ok {
		return
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", err.Error())
		return
	}
	s.mu.Lock()
	fault := s.stream
	s.stream = streamFault{}
	vanish := s.vanish
	s.vanish = false
	s.mu.Unlock()

	cmdID := randHex(16)
	ctx, kill := context.WithCancel(context.Background()) // a disconnect does not stop it, as in execd
	cmd := &command{content: req.Command, ctl: ctlW, kill: kill, done: make(chan struct{}), startedAt: time.Now()}
	s.mu.Lock()
	b.cmds[cmdID] = cmd
	s.mu.Unlock()

	// Events go from the command's goroutine to this handler through a
	// channel; once the handler has gone, they are dropped.
	ev := &eventQueue{ch: make(chan event, 64), handlerGone: make(chan struct{})}
	defer close(ev.handlerGone)
	run := commandRun{s: s, b: b, cmd: cmd, id: cmdID, ctx: ctx, ctlR: ctlR, cwd: cwd, env: s.commandEnv(req.Envs), timeout: commandTimeout(req.Timeout), ev: ev}
	if req.Background {
		run.background()
	} else {
		run.foreground()
	}
	s.streamEvents(w, r, b, ev.ch, fault, vanish, kill)
}

// decodeCommand reads POST /command's body; false when it answered.
func decodeCommand(w http.ResponseWriter, r *http.Request) (commandRequest, bool) {
	var req commandRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		bindError(w, err)
		return req, false
	}
	invalid := func(why string) (commandRequest, bool) {
		execdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "invalid request, validation error "+why)
		return req, false
	}
	switch {
	case req.Command == "":
		return invalid("Key: 'RunCommandRequest.Command' Error:Field validation for 'Command' failed on the 'required' tag")
	case req.Timeout != nil && *req.Timeout < 0:
		return invalid("Key: 'RunCommandRequest.TimeoutMs' Error:Field validation for 'TimeoutMs' failed on the 'gte' tag")
	case req.Gid != nil && req.Uid == nil:
		return invalid("uid is required when gid is provided")
	}
	return req, true
}

// commandCwd resolves and checks the command's working directory; false
// when it answered.
func (s *Server) commandCwd(w http.ResponseWriter, r *http.Request, b *sbx, raw string) (string, bool) {
	cwd := s.resolve(raw)
	if raw == "" {
		return cwd, true
	}
	invalid := func(why string) (string, bool) {
		execdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "invalid request, validation error "+why)
		return "", false
	}
	fi, err := s.drv.Stat(r.Context(), b.id, cwd)
	if err == nil && fi.Mode&os.ModeSymlink != 0 {
		fi, err = s.statFollow(r.Context(), b, cwd)
	}
	switch {
	case errors.Is(err, sandbox.ErrNotFound) && s.typed():
		return invalid("working directory does not exist: " + raw + ": " + notExist("stat", cwd))
	case errors.Is(err, sandbox.ErrNotFound):
		return invalid("working directory does not exist: " + raw)
	case err != nil:
		return invalid(fmt.Sprintf("cannot access working directory %q: %v", raw, err))
	case !fi.IsDir():
		return invalid("working directory path is not a directory: " + raw)
	}
	return cwd, true
}

// commandEnv is what a command's environment adds to the sandbox's:
// execd's own token when it got it by environment, and the request's.
func (s *Server) commandEnv(envs map[string]string) map[string]string {
	env := map[string]string{}
	if s.opts.ExecdTokenInEnv && s.opts.ExecdToken != "" {
		env["EXECD_ACCESS_TOKEN"] = s.opts.ExecdToken // execd's own environment, inherited
	}
	for k, v := range envs {
		env[k] = v
	}
	return env
}

// commandTimeout reads the request's timeout (ms; 0 or absent: none).
func commandTimeout(ms *int64) time.Duration {
	if ms != nil && *ms > 0 {
		return time.Duration(*ms) * time.Millisecond
	}
	return sandbox.MaxLifetime
}

// eventQueue carries a command's events to the handler that streams them.
type eventQueue struct {
	ch          chan event
	handlerGone chan struct{}
}

// emit queues ev; false once the handler has gone.
func (q *eventQueue) emit(ev event) bool {
	select {
	case q.ch <- ev:
		return true
	case <-q.handlerGone:
		return false
	}
}

// commandRun is one command on its way through the backing sandbox.
type commandRun struct {
	s       *Server
	b       *sbx
	cmd     *command
	id      string
	ctx     context.Context
	ctlR    *os.File
	cwd     string
	env     map[string]string
	timeout time.Duration
	ev      *eventQueue
}

// background runs the command with stdout and stderr in one buffer, as
// execd's one file for both; the stream only says it started.
func (c commandRun) background() {
	c.cmd.background = true
	go func() {
		defer c.cmd.kill()
		defer c.ctlR.Close()
		out := &combinedOutput{s: c.s, c: c.cmd}
		res, err := c.s.drv.Exec(c.ctx, c.b.id, sandbox.ExecRequest{
			Command: interruptible, Timeout: c.timeout, Workdir: c.cwd, Stdin: c.ctlR, Stdout: out, Stderr: out,
			Env: withCommand(c.env, "exec 2>&1\n"+c.cmd.content),
		})
		c.s.finish(c.cmd, res, err)
		c.cmd.ctl.Close()
		close(c.cmd.done)
	}()
	go func() {
		if c.ev.emit(event{Type: "init", Text: c.id}) && c.ev.emit(event{Type: "ping", Text: "pong"}) &&
			c.ev.emit(event{Type: "execution_complete", ExecutionTime: max(1, time.Since(c.cmd.startedAt).Milliseconds())}) {
			close(c.ev.ch)
		}
	}()
}

// foreground runs the command and sends its output as execd polls it,
// then its terminal event.
func (c commandRun) foreground() {
	stdout, stderr := &outputPoller{typ: "stdout"}, &outputPoller{typ: "stderr"}
	flush := func(final bool) bool {
		for _, p := range []*outputPoller{stdout, stderr} {
			for _, line := range p.lines(final) {
				if !c.ev.emit(event{Type: p.typ, Text: line}) {
					return false
				}
			}
		}
		return true
	}
	go func() {
		defer c.cmd.kill()
		defer c.ctlR.Close()
		c.ev.emit(event{Type: "init", Text: c.id})
		c.ev.emit(event{Type: "ping", Text: "pong"})
		stopPolling := pollOutput(flush)
		res, err := c.s.drv.Exec(c.ctx, c.b.id, sandbox.ExecRequest{
			Command: interruptible, Timeout: c.timeout, Workdir: c.cwd, Stdin: c.ctlR, Stdout: stdout, Stderr: stderr,
			Env: withCommand(c.env, c.cmd.content),
		})
		stopPolling()
		final, lost := c.s.finish(c.cmd, res, err)
		c.cmd.ctl.Close()
		close(c.cmd.done)
		if lost {
			return // the sandbox is gone: no terminal event, the stream breaks
		}
		if flush(true) && c.ev.emit(final) {
			close(c.ev.ch)
		}
	}()
}

// pollOutput flushes the output every outputPoll until the returned stop
// is called; stop returns once no flush runs, so events never close under
// a flush's send nor interleave with the final one.
func pollOutput(flush func(final bool) bool) (stop func()) {
	polling, pollerDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(pollerDone)
		t := time.NewTicker(outputPoll)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if !flush(false) {
					return
				}
			case <-polling:
				return
			}
		}
	}()
	return func() {
		close(polling)
		<-pollerDone
	}
}

// streamEvents writes a command's events as execd does: bare JSON objects
// each followed by a blank line, a ping every pingEvery, and after the
// terminal event a ping and Options.Linger of an open stream. A stream
// fault of the test's cuts or stalls it.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request, b *sbx, events <-chan event, fault streamFault, vanish bool, kill func()) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	sw := &streamWriter{s: s, w: w, r: r, b: b, flusher: flusher, fault: fault}
	flusher.Flush()
	pings := time.NewTicker(pingEvery)
	defer pings.Stop()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				sw.linger()
				return
			}
			if vanish && (ev.Type == "stdout" || ev.Type == "stderr") {
				s.remove(b.id)
			}
			sw.write(ev, true)
		case <-pings.C:
			sw.write(event{Type: "ping", Text: "pong"}, false)
		case <-b.gone:
			panic(http.ErrAbortHandler)
		case <-s.closing:
			kill()
			panic(http.ErrAbortHandler)
		case <-r.Context().Done():
			return
		}
	}
}

// streamWriter writes one command stream's events, applying a fault.
type streamWriter struct {
	s       *Server
	w       http.ResponseWriter
	r       *http.Request
	b       *sbx
	flusher http.Flusher
	fault   streamFault
	// sent counts the events written but periodic pings, so a command that
	// starts slowly (a loaded machine) cannot move the cut from the event
	// a test aims at to an earlier one.
	sent int
}

func (sw *streamWriter) write(ev event, counted bool) {
	if ev.Timestamp == 0 {
		ev.Timestamp = time.Now().UnixMilli()
	}
	data, _ := json.Marshal(ev)
	data = append(data, '\n', '\n')
	if sw.fault.kind != 0 && sw.sent >= sw.fault.after {
		switch sw.fault.kind {
		case cutMidEvent:
			sw.w.Write(data[:len(data)/2])
			sw.flusher.Flush()
			panic(http.ErrAbortHandler)
		case cutBetween:
			panic(http.ErrAbortHandler)
		case stall:
			sw.s.hold(sw.r, sw.b) // the connection stays open, nothing more comes
			panic(http.ErrAbortHandler)
		}
	}
	if _, err := sw.w.Write(data); err != nil {
		panic(http.ErrAbortHandler)
	}
	sw.flusher.Flush()
	if counted {
		sw.sent++
	}
}

// linger: after the terminal event execd keeps the stream open for its
// graceful-shutdown time; a ping may come in it.
func (sw *streamWriter) linger() {
	sw.write(event{Type: "ping", Text: "pong"}, true)
	t := time.NewTimer(sw.s.opts.Linger)
	defer t.Stop()
	select {
	case <-t.C:
	case <-sw.r.Context().Done():
	case <-sw.s.closing:
	case <-sw.b.gone:
	}
}

// withCommand is env plus the command for the interruptible wrapper,
// which takes it out of the environment before the command starts.
func withCommand(env map[string]string, command string) map[string]string {
	out := make(map[string]string, len(env)+1)
	for k, v := range env {
		out[k] = v
	}
	out[commandVar] = command
	return out
}

const commandVar = "FAKE_EXECD_COMMAND"

// finish records how the command ended and builds its terminal event;
// lost means the sandbox went away under it.
func (s *Server) finish(cmd *command, res sandbox.ExecResult, err error) (final event, lost bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd.finishedAt = time.Now()
	killed := func(signal string) event {
		cmd.exitCode, cmd.errText = -1, "signal: "+signal
		return event{Type: "error", Error: &eventError{Name: "CommandExecError", Value: "-1", Traceback: []string{"signal: " + signal}}}
	}
	switch {
	case res.SandboxLost || errors.Is(err, sandbox.ErrGone):
		return event{}, true
	case res.TimedOut:
		return killed("killed"), false
	case err != nil && cmd.interrupted:
		return killed("killed"), false // SIGKILLed by the interrupt's last resort
	case err != nil:
		cmd.exitCode, cmd.errText = -1, err.Error()
		return event{Type: "error", Error: &eventError{Name: "CommandExecError", Value: err.Error(), Traceback: []string{err.Error()}}}, false
	case cmd.interrupted && res.ExitCode == 128+15:
		return killed("terminated"), false
	case cmd.interrupted && res.ExitCode == 128+9:
		return killed("killed"), false
	case res.ExitCode != 0:
		cmd.exitCode, cmd.errText = res.ExitCode, fmt.Sprintf("exit status %d", res.ExitCode)
		return event{Type: "error", Error: &eventError{Name: "CommandExecError", Value: strconv.Itoa(res.ExitCode), Traceback: []string{cmd.errText}}}, false
	}
	return event{Type: "execution_complete", ExecutionTime: res.Duration.Milliseconds()}, false
}

func (s *Server) interrupt(w http.ResponseWriter, r *http.Request, b *sbx) {
	id := r.URL.Query().Get("id")
	if id == "" {
		execdError(w, http.StatusBadRequest, "MISSING_QUERY", "missing query parameter 'id'")
		return
	}
	s.mu.Lock()
	cmd, ok := b.cmds[id]
	running := ok && cmd.running()
	if running {
		cmd.interrupted = true
	}
	s.mu.Unlock()
	switch {
	case !ok:
		execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "error interruptting code context. no such session")
		return
	case !running:
		execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "error interruptting code context. command session "+id+" is not running")
		return
	}
	cmd.ctl.Write([]byte("\n")) // the wrapper sends SIGTERM, then SIGKILL after 3 s
	// execd answers only once the process group is gone.
	t := time.NewTimer(interruptGrace + 2*time.Second)
	defer t.Stop()
	select {
	case <-cmd.done:
	case <-t.C:
		cmd.kill()
		<-cmd.done
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) status(w http.ResponseWriter, b *sbx, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd, ok := b.cmds[id]
	if !ok {
		execdError(w, http.StatusNotFound, "INVALID_REQUEST_BODY", "command not found: "+id)
		return
	}
	out := map[string]any{"id": id, "content": cmd.content, "running": cmd.running(), "started_at": cmd.startedAt}
	if !cmd.running() {
		out["exit_code"] = cmd.exitCode
		out["finished_at"] = cmd.finishedAt
		if cmd.errText != "" {
			out["error"] = cmd.errText
		}
	}
	execdJSON(w, http.StatusOK, out)
}

// logs is GET /command/{id}/logs?cursor=N: a background command's output
// from byte N on, and the next cursor in a header.
func (s *Server) logs(w http.ResponseWriter, r *http.Request, b *sbx, id string) {
	cursor, err := strconv.ParseInt(r.URL.Query().Get("cursor"), 10, 64)
	if err != nil {
		cursor = 0
	}
	s.mu.Lock()
	cmd, ok := b.cmds[id]
	var out []byte
	if ok && cmd.background && cursor >= 0 {
		out = append(out, cmd.output[min(cursor, int64(len(cmd.output))):]...)
	}
	s.mu.Unlock()
	switch {
	case !ok:
		execdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "command not found: "+id)
		return
	case !cmd.background:
		execdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "command "+id+" is not running in background")
		return
	case cursor < 0:
		execdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", fmt.Sprintf("error seek file: seek /tmp/%s.output: invalid argument", id))
		return
	}
	w.Header().Set("EXECD-COMMANDS-TAIL-CURSOR", strconv.FormatInt(cursor+int64(len(out)), 10))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	w.Write(out)
}

// hold keeps a response open without sending anything more, until the
// client leaves, the sandbox goes or the fake closes: what a client that
// trusts a Content-Length sees from execd's body-less answers.
func (s *Server) hold(r *http.Request, b *sbx) {
	select {
	case <-r.Context().Done():
	case <-s.closing:
	case <-b.gone:
	}
}
