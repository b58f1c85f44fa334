// Package supervisor is the Airflow side of the coordinator protocol, in Go:
// it forks a bundle with --comm/--logs, sends StartupDetails, serves
// connections, variables and XCom from local sources, shows the task's logs
// and reports the final state the way Airflow's supervisor would. The local
// runner (`airflow-go-worker run`) and end-to-end tests use it.
package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/schema"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// Task states, as Airflow names them.
const (
	StateSuccess    = "success"
	StateFailed     = "failed"
	StateUpForRetry = "up_for_retry"
	StateRemoved    = "removed"
	StateSkipped    = "skipped"
	// StateDeferred: the task sent DeferTask (RunDeferrable resumes it).
	StateDeferred = "deferred"
)

const (
	// DefaultStartupTimeout is Airflow's task_startup_timeout.
	DefaultStartupTimeout = 10 * time.Second
	// DefaultKillGrace is how long a SIGTERMed child gets before SIGKILL:
	// Airflow's escalation_delay, so local runs meet the same deadline.
	DefaultKillGrace = 5 * time.Second
)

// Supervisor runs tasks of one bundle executable.
type Supervisor struct {
	// Executable is the bundle to fork; Args come before the --comm/--logs
	// pair Airflow appends (e.g. {"--bundle-config", file}).
	Executable string
	Args       []string
	// Env is the child's environment; nil means os.Environ(). Connections
	// (AIRFLOW_CONN_<ID>) and variables (AIRFLOW_VAR_<KEY>) are served
	// from it.
	Env []string
	// ConnectionsFile is consulted after AIRFLOW_CONN_<ID> (optional).
	ConnectionsFile string
	// Variables are served over the comm socket only, before
	// AIRFLOW_VAR_<KEY>: the child's environment does not carry them, as a
	// variable kept in Airflow's metadata database is not in a task's.
	Variables map[string]string
	// StateDir keeps XComs between runs as
	// <StateDir>/xcom/<dag_id>/<run_id>/<task_id>/<key>.json; empty keeps
	// them in memory for the Supervisor's lifetime.
	StateDir string
	// DagRunStates answer GetDagRunState for the runs they name, keyed
	// "<dag_id>/<run_id>", before what StateDir (or memory) records: the
	// supervisor records each run it runs a task of as running, and
	// SetDagRunState sets its end. A run found in neither is answered as
	// the Execution API answers a missing one (404).
	DagRunStates map[string]string
	// Logs shows the task's log lines and output, human-readable, with
	// masked secrets redacted. nil discards them.
	Logs io.Writer
	// StartupTimeout bounds the wait for both connections
	// (DefaultStartupTimeout when zero).
	StartupTimeout time.Duration
	// KillGrace is the SIGTERM-to-SIGKILL delay on cancellation
	// (DefaultKillGrace when zero).
	KillGrace time.Duration
	// Airflow is the release whose supervisor this one plays: "3.3"
	// (schema.DefaultAirflow, when empty) or "3.4". Like that release's coordinator, it refuses a
	// bundle whose schema version it does not know.
	Airflow string
	// SchemaVersion is the supervisor schema version the bundle speaks;
	// empty reads the one Executable's footer declares (a plain build
	// declares none and speaks schema.Default). Only
	// 2026-10-30 carries a TaskRequest's ArgBindings.
	SchemaVersion string

	memMu     sync.Mutex
	mem       map[string]any    // in-memory XCom when StateDir is empty
	memRuns   map[string]string // in-memory Dag run states when StateDir is empty
	memEvents []storedEvent     // in-memory asset events when StateDir is empty
}

// TaskRequest names one task instance to run.
type TaskRequest struct {
	DagID, TaskID, RunID string
	Conf                 map[string]any
	// ArgBindings become ti_context.arg_bindings: {name, kind: literal,
	// value} or {name, kind: xcom, task_id}.
	ArgBindings []protocol.ArgBinding
	TryNumber   int // 1 when zero
	MaxTries    int
	ShouldRetry bool
	// Mapped says the task instance is one of a mapped task's expansions,
	// with index MapIndex; otherwise map_index is -1 (the zero value of a
	// TaskRequest is an unmapped task).
	Mapped   bool
	MapIndex int
	// AssetEvents become ti_context.dag_run.consumed_asset_events: the
	// events an asset-triggered run was triggered by (RunType then
	// defaults to asset_triggered).
	AssetEvents []protocol.AssetEvent
	// RunType is the Dag run's run_type (manual when empty).
	RunType string
	// TIID is the task instance id (a new one when empty): a resume runs
	// the same task instance again.
	TIID string
	// NextMethod, NextKwargs and TIStartDate resume a deferred task
	// instance (ti_context's next_method, next_kwargs and start_date);
	// RunDeferrable sets them.
	NextMethod  string
	NextKwargs  map[string]any
	TIStartDate time.Time
}

// Result is how one task instance ended.
type Result struct {
	// State is what Airflow would record: success, failed, up_for_retry,
	// removed or skipped.
	State       string
	ExitCode    int
	RetryReason string
	// Requests lists the body types the runtime sent, in order, including
	// the terminal one.
	Requests []string
	// LogLines are the JSON records from the logs socket (secrets
	// redacted): the most recent ones, MaxKeptLogLines bytes at most;
	// LogLinesDropped counts the older ones left out.
	LogLines        []map[string]any
	LogLinesDropped int
	// Output is the child's stdout and stderr lines, "stdout: ..." or
	// "stderr: ...": the most recent ones, MaxKeptOutput bytes at most;
	// OutputDropped counts the older ones left out.
	Output        []string
	OutputDropped int
	// Terminal is the terminal message body, nil when none was sent.
	Terminal map[string]any
	// Replies are the reply bodies sent, in order, secrets redacted (an
	// error in the frame's third element appears as its body).
	Replies []map[string]any
	// Usage is the child's resource usage (CPU time, peak RSS) from
	// wait4, nil when it never started; the start-up benchmarks read it.
	Usage *syscall.Rusage
	// RenderedFields is the last SetRenderedFields (secrets redacted),
	// RenderedMapIndex the last rendered map index (SetRenderedMapIndex or
	// the terminal frame's).
	RenderedFields   map[string]any
	RenderedMapIndex string
	// Outlets and OutletEvents are a SucceedTask's task_outlets and
	// outlet_events, checked as the Execution API reads them.
	Outlets      []map[string]any
	OutletEvents []map[string]any
	// SkippedDownstream are the task ids a branch had Airflow skip
	// (SkipDownstreamTasks).
	SkippedDownstream []string
	// MappedLength is the mapped_length a return value was pushed with
	// (a mapped downstream expands over it), nil when none.
	MappedLength *int
	// Deferral is what a DeferTask asked for, nil unless State is
	// deferred.
	Deferral *Deferral
	// Rejected lists the requests Airflow's supervisor would have failed
	// to validate (logged and left unanswered, or, for a terminal frame,
	// its outcome lost), with why.
	Rejected []string
}

func (s *Supervisor) env() []string {
	if s.Env == nil {
		return os.Environ()
	}
	return s.Env
}

func (s *Supervisor) lookupEnv(name string) (string, bool) {
	env := s.env()
	for i := len(env) - 1; i >= 0; i-- { // last wins, like exec
		if k, v, ok := strings.Cut(env[i], "="); ok && k == name {
			return v, true
		}
	}
	return "", false
}

// newUUID returns a random version-4 UUID string for the TI id.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// child is one forked bundle with its two accepted connections.
type child struct {
	cmd    *exec.Cmd
	comm   net.Conn
	logs   net.Conn
	exited chan struct{} // closed when Wait returns
	exit   int
	usage  *syscall.Rusage
	out    *outputSink
}

// start forks the bundle and accepts both connections, in either order.
func (s *Supervisor) start(ctx context.Context, red *redactor, show *shower) (*child, error) {
	if s.Executable == "" {
		return nil, errors.New("supervisor: Executable is empty; set it to the bundle binary")
	}
	commL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("supervisor: listening for the comm socket: %w", err)
	}
	defer commL.Close()
	logsL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("supervisor: listening for the logs socket: %w", err)
	}
	defer logsL.Close()

	args := append(append([]string{}, s.Args...), "--comm="+commL.Addr().String(), "--logs="+logsL.Addr().String())
	cmd := exec.Command(s.Executable, args...)
	cmd.Env = s.env()
	out := newOutputSink(red, show)
	stdout, stderr := out.writer("stdout"), out.writer("stderr")
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// A grandchild that inherits the pipes must not keep Wait (and so the
	// task's end) hanging.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("supervisor: starting %s: %w", s.Executable, err)
	}
	c := &child{cmd: cmd, exited: make(chan struct{}), out: out}
	go func() {
		err := cmd.Wait()
		stdout.Flush()
		stderr.Flush()
		c.exit = exitCode(err)
		if ps := cmd.ProcessState; ps != nil {
			// The process's own status: Wait's error is also
			// exec.ErrWaitDelay when the process exited 0 but something
			// it left behind kept its output open past WaitDelay.
			c.exit = processExit(ps)
			c.usage, _ = ps.SysUsage().(*syscall.Rusage)
		}
		close(c.exited)
	}()

	timeout := s.startupTimeout()
	rejected := &rejections{}
	commCh := acceptFromChild(commL, "comm", cmd.Process.Pid, show, rejected)
	logsCh := acceptFromChild(logsL, "logs", cmd.Process.Pid, show, rejected)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for c.comm == nil || c.logs == nil {
		select {
		case a := <-commCh:
			if a.err != nil {
				c.kill()
				return c, fmt.Errorf("supervisor: accepting the comm socket: %w", a.err)
			}
			c.comm = a.conn
		case a := <-logsCh:
			if a.err != nil {
				c.kill()
				return c, fmt.Errorf("supervisor: accepting the logs socket: %w", a.err)
			}
			c.logs = a.conn
		case <-c.exited:
			c.closeConns()
			return c, fmt.Errorf("process exited with %d before connecting%s", c.exit, rejected)
		case <-deadline.C:
			c.kill()
			return c, fmt.Errorf("process did not connect within %s%s", timeout, rejected)
		case <-ctx.Done():
			c.kill()
			return c, ctx.Err()
		}
	}
	return c, nil
}

// peerCheckWait is how long a connection's socket may take to show in
// /proc before it is refused (Airflow's task SDK waits up to 1 s too).
const peerCheckWait = time.Second

type accepted struct {
	conn net.Conn
	err  error
}

// acceptFromChild accepts connections on l until one comes from the
// child's process tree (pid and its descendants), and delivers that one;
// any other is closed unread, before it is sent anything. Each is checked
// on its own goroutine, so a flood of foreign connections cannot hold the
// child's back. It stops when l is closed.
func acceptFromChild(l net.Listener, name string, pid int, show *shower, rejected *rejections) <-chan accepted {
	ch := make(chan accepted, 1)
	var once sync.Once
	deliver := func(a accepted) bool {
		sent := false
		once.Do(func() { ch <- a; sent = true })
		return sent
	}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				deliver(accepted{err: err})
				return
			}
			go func() {
				if held, why := heldByProcessTree(conn, pid, peerCheckWait); !held {
					msg := fmt.Sprintf("refused a connection to the %s socket from %s: %s; only the task's own processes may connect", name, conn.RemoteAddr(), why)
					rejected.add(msg)
					show.line("supervisor", msg)
					conn.Close()
					return
				}
				if !deliver(accepted{conn: conn}) {
					conn.Close() // a second one from the task: the first won
				}
			}()
		}
	}()
	return ch
}

// rejections keeps what acceptFromChild refused, for the start-up error.
type rejections struct {
	mu   sync.Mutex
	n    int
	last string
}

func (r *rejections) add(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	r.last = msg
}

// String is "" or, after a start-up error, what was refused.
func (r *rejections) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d connection(s) refused; the last: %s)", r.n, r.last)
}

func (c *child) closeConns() {
	if c.comm != nil {
		c.comm.Close()
	}
	if c.logs != nil {
		c.logs.Close()
	}
}

func (c *child) kill() {
	_ = c.cmd.Process.Kill() // fails only once it has exited, which exited says
	<-c.exited
	c.closeConns()
}

// terminate sends SIGTERM, then SIGKILL after grace.
func (c *child) terminate(grace time.Duration) {
	_ = c.cmd.Process.Signal(syscall.SIGTERM) // likewise
	select {
	case <-c.exited:
	case <-time.After(grace):
		c.cmd.Process.Kill()
	}
}

// processExit is an exited process's code, or 128+N when signal N ended it.
func processExit(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return -1
}

// RunTask runs one task instance to the end and reports what Airflow would
// record. The error is for failures of the supervisor itself or of
// start-up; Result.State is still set (failed or up_for_retry) in the
// latter case, as Airflow's _finish_failed_startup does. Cancelling ctx
// SIGTERMs the child and, after KillGrace, SIGKILLs it.
func (s *Supervisor) RunTask(ctx context.Context, req TaskRequest) (Result, error) {
	if req.DagID == "" || req.TaskID == "" {
		return Result{}, errors.New("supervisor: TaskRequest needs DagID and TaskID")
	}
	req = withRequestDefaults(req)
	red := newRedactor()
	show := &shower{w: s.Logs}
	failedState := StateFailed
	if req.ShouldRetry {
		failedState = StateUpForRetry
	}
	version, err := s.BundleSchema()
	if err != nil {
		return Result{State: failedState, ExitCode: -1}, fmt.Errorf("task %s.%s: %w", req.DagID, req.TaskID, err)
	}
	if len(req.ArgBindings) > 0 && !schema.AtLeast(version, schema.V34) {
		show.line("supervisor", fmt.Sprintf("schema %s (Airflow 3.3) has no arg_bindings: the stub call's %d argument(s) are dropped, as Airflow 3.3 drops them", version, len(req.ArgBindings)))
		req.ArgBindings = nil
	}
	// Airflow's run is running while any of its tasks runs.
	if err := s.SetDagRunState(req.DagID, req.RunID, DagRunRunning); err != nil {
		return Result{State: failedState, ExitCode: -1}, fmt.Errorf("task %s.%s: %w", req.DagID, req.TaskID, err)
	}
	c, err := s.start(ctx, red, show)
	if err != nil {
		res := Result{State: failedState, ExitCode: -1}
		if c != nil {
			res.ExitCode = c.exit
			res.Output, res.OutputDropped = c.out.lines()
		}
		return res, fmt.Errorf("starting task %s.%s: %w", req.DagID, req.TaskID, err)
	}
	defer c.closeConns()
	sd := startupDetails(req)
	res := s.serveChild(ctx, c, StartupBody(sd, version), version, sd.TI, red, show)
	res.State = finalState(res, req.ShouldRetry)
	acceptDeferral(&res, failedState, show)
	if res.State == StateSuccess {
		if err := s.recordAssetEvents(sd.TI, res.OutletEvents); err != nil {
			show.line("supervisor", "recording the task's asset events: "+err.Error())
		}
	}
	return res, nil
}

// withRequestDefaults fills in what a TaskRequest may leave out.
func withRequestDefaults(req TaskRequest) TaskRequest {
	if req.RunID == "" {
		req.RunID = "manual__" + time.Now().UTC().Format(time.RFC3339Nano)
	}
	if req.TryNumber < 1 {
		req.TryNumber = 1
	}
	return req
}

// startupDetails is the first frame for req, as Airflow's supervisor builds
// it. No hostname, as Airflow's scheduler sends none: the task's runtime
// fills in the host it runs on.
func startupDetails(req TaskRequest) protocol.StartupDetails {
	mapIndex := -1
	if req.Mapped {
		mapIndex = req.MapIndex
	}
	now := time.Now().UTC()
	tiID := req.TIID
	if tiID == "" {
		tiID = newUUID()
	}
	return protocol.StartupDetails{
		TI: protocol.TaskInstance{ID: tiID, DagID: req.DagID, TaskID: req.TaskID, RunID: req.RunID,
			TryNumber: req.TryNumber, MapIndex: mapIndex, DagVersionID: newUUID(), Queue: "default", MaxTries: req.MaxTries},
		DagRelPath: "local",
		BundleName: "local",
		StartDate:  now,
		DagRun: protocol.DagRun{DagID: req.DagID, RunID: req.RunID, RunType: runType(req), State: "running",
			LogicalDate: now, RunAfter: now, StartDate: now, Conf: req.Conf, TriggeringAssetEvents: req.AssetEvents},
		ShouldRetry: req.ShouldRetry,
		ArgBindings: req.ArgBindings,
		NextMethod:  req.NextMethod,
		NextKwargs:  req.NextKwargs,
		TIStartDate: req.TIStartDate,
	}
}

// acceptDeferral reads a deferred result's DeferTask; one the local
// supervisor cannot play fails the task, saying why.
func acceptDeferral(res *Result, failedState string, show *shower) {
	if res.State != StateDeferred {
		return
	}
	d, err := deferralOf(res.Terminal, time.Now())
	if err != nil {
		res.State = failedState
		res.Rejected = append(res.Rejected, err.Error())
		show.line("supervisor", err.Error())
	}
	res.Deferral = d
}

// serveChild serves the started child until it has exited: the comm socket
// (from the first frame to the terminal one), its log records and its
// output. A cancelled ctx sends it SIGTERM, then SIGKILL after the kill
// grace.
func (s *Supervisor) serveChild(ctx context.Context, c *child, startup protocol.Body, version string, ti protocol.TaskInstance, red *redactor, show *shower) Result {
	type logsResult struct {
		lines   []map[string]any
		dropped int
	}
	logsDone := make(chan logsResult, 1)
	go func() {
		lines, dropped := readLogs(c.logs, red, show)
		logsDone <- logsResult{lines, dropped}
	}()
	var res Result
	commDone := make(chan struct{})
	go func() {
		defer close(commDone)
		s.serveComm(c.comm, startup, version, ti, red, show, &res)
	}()
	select {
	case <-commDone:
	case <-ctx.Done():
		show.line("supervisor", "cancelled; sending SIGTERM to the task")
		c.terminate(s.killGrace())
		<-commDone
	}
	// The runtime closes its sockets and exits right after the terminal
	// frame; wait for the exit so the state can be decided.
	select {
	case <-c.exited:
	case <-ctx.Done():
		c.terminate(s.killGrace())
		<-c.exited
	}
	c.logs.SetReadDeadline(time.Now().Add(2 * time.Second)) // a grandchild may hold it open
	logs := <-logsDone
	res.LogLines, res.LogLinesDropped = logs.lines, logs.dropped
	res.ExitCode = c.exit
	res.Usage = c.usage
	res.Output, res.OutputDropped = c.out.lines()
	return res
}

func runType(req TaskRequest) string {
	switch {
	case req.RunType != "":
		return req.RunType
	case len(req.AssetEvents) > 0:
		return "asset_triggered"
	}
	return "manual"
}

func (s *Supervisor) killGrace() time.Duration {
	if s.KillGrace > 0 {
		return s.KillGrace
	}
	return DefaultKillGrace
}

// finalState follows Airflow's ActivitySubprocess.final_state: a reported
// state counts only with exit 0; no report with exit 0 is success.
func finalState(r Result, shouldRetry bool) string {
	if r.ExitCode != 0 {
		if shouldRetry {
			return StateUpForRetry
		}
		return StateFailed
	}
	if r.Terminal == nil {
		return StateSuccess
	}
	switch r.Terminal["type"] {
	case protocol.TypeSucceedTask:
		return StateSuccess
	case protocol.TypeRetryTask:
		return StateUpForRetry
	case protocol.TypeDeferTask:
		return StateDeferred
	}
	if st, _ := r.Terminal["state"].(string); st != "" {
		return st
	}
	return StateFailed
}

// serveComm sends StartupDetails and answers requests until the runtime
// closes the socket.
func (s *Supervisor) serveComm(conn net.Conn, startup protocol.Body, schema string, ti protocol.TaskInstance, red *redactor, show *shower, res *Result) {
	p, err := protocol.EncodeReply(0, startup, nil)
	if err == nil {
		err = protocol.WriteFrame(conn, p)
	}
	if err != nil {
		show.line("supervisor", "sending StartupDetails: "+err.Error())
		return
	}
	for {
		p, err := protocol.ReadFrame(conn)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
				show.line("supervisor", "reading the comm socket: "+err.Error())
			}
			return
		}
		m, err := protocol.DecodeMessage(p)
		if err != nil {
			// Airflow only logs undecodable requests; so do we.
			show.line("supervisor", "unable to decode a message from the task: "+err.Error())
			continue
		}
		typ := m.Type()
		res.Requests = append(res.Requests, typ)
		if why := invalidRequest(m.Body); why != "" {
			res.Rejected = append(res.Rejected, why)
			// As Airflow's supervisor: log it, answer nothing.
			show.line("supervisor", "unable to validate a request, so no reply is sent (Airflow's supervisor would not answer either, and the task waits until it is killed): "+why)
			continue
		}
		body, errBody := s.handle(m, ti, forSchema(m.Body, schema), red, show, res)
		reply := protocol.Body(body)
		if body == nil && errBody != nil {
			reply = errBody
		}
		if reply != nil {
			if raw, err := protocol.AsRaw(reply); err == nil {
				res.Replies = append(res.Replies, red.applyAny(map[string]any(raw)).(map[string]any))
			}
		}
		var errReply protocol.Body
		if errBody != nil {
			errReply = errBody
		}
		rp, err := protocol.EncodeReply(m.ID, body, errReply)
		if err != nil {
			rp, _ = protocol.EncodeReply(m.ID, nil, apiError("API_SERVER_ERROR", "encoding the reply: "+err.Error()))
		}
		if len(rp) > protocol.MaxFrameSize {
			// Not sending it would leave the task waiting for this reply
			// forever: answer, with an error that says why.
			msg := fmt.Sprintf("the reply to %s is %d bytes, over the comm socket's %d-byte frame cap; make the value smaller (e.g. the connection's extra)", typ, len(rp), protocol.MaxFrameSize)
			show.line("supervisor", msg)
			rp, _ = protocol.EncodeReply(m.ID, nil, apiError("API_SERVER_ERROR", msg))
		}
		// After a terminal frame the runtime may already be gone.
		if err := protocol.WriteFrame(conn, rp); err != nil && res.Terminal == nil {
			show.line("supervisor", "writing a reply: "+err.Error())
		}
	}
}

func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func apiError(code, message string) *protocol.ErrorResponse {
	return &protocol.ErrorResponse{Error: code, Detail: map[string]any{"message": message}}
}

// handle answers one valid request: (reply body, third-element error).
// A nil body with a nil error is an empty reply (msgpack nil), as Airflow
// answers SetXCom and MaskSecret.
func (s *Supervisor) handle(m protocol.Message, ti protocol.TaskInstance, b map[string]any, red *redactor, show *shower, res *Result) (protocol.Body, *protocol.ErrorResponse) {
	str := func(k string) string { v, _ := b[k].(string); return v }
	switch m.Type() {
	case protocol.TypeSucceedTask, protocol.TypeRetryTask, protocol.TypeTaskState, protocol.TypeDeferTask:
		res.Terminal = b
		if r, ok := b["retry_reason"].(string); ok {
			res.RetryReason = red.apply(r)
		}
		if r, ok := b["rendered_map_index"].(string); ok {
			res.RenderedMapIndex = r
		}
		res.Outlets, res.OutletEvents = maps(b["task_outlets"]), maps(b["outlet_events"])
		return nil, nil
	case protocol.TypeSetRenderedFields:
		res.RenderedFields, _ = red.applyAny(b["rendered_fields"]).(map[string]any)
		return nil, nil
	case protocol.TypeSetRenderedMapIndex:
		res.RenderedMapIndex = str("rendered_map_index")
		return nil, nil
	case protocol.TypeGetXComSequenceSlice:
		list, err := s.mappedXComs(str("dag_id"), str("run_id"), str("task_id"), str("key"))
		if err != nil {
			return nil, apiError("API_SERVER_ERROR", err.Error())
		}
		return &protocol.XComSequenceSliceResult{Root: list}, nil
	case protocol.TypeGetConnection:
		id := str("conn_id")
		c, found, err := s.connection(id)
		if err != nil {
			show.line("supervisor", err.Error())
			return nil, apiError("API_SERVER_ERROR", err.Error())
		}
		if !found {
			return &protocol.ErrorResponse{Error: "CONNECTION_NOT_FOUND", Detail: map[string]any{"conn_id": id}}, nil
		}
		// The supervisor knows the password it hands out: keep it out of
		// what it shows even when the task prints it to stdout or stderr.
		red.add(c.Password)
		return connectionResult(c), nil
	case protocol.TypeGetVariable:
		key := str("key")
		if v, ok := s.Variables[key]; ok {
			return &protocol.VariableResult{Key: key, Value: v}, nil
		}
		if v, ok := s.lookupEnv("AIRFLOW_VAR_" + strings.ToUpper(key)); ok {
			return &protocol.VariableResult{Key: key, Value: v}, nil
		}
		return &protocol.ErrorResponse{Error: "VARIABLE_NOT_FOUND", Detail: map[string]any{"key": key}}, nil
	// XComs are keyed by (dag, run, task, key); map_index is not part of
	// the local store, so mapped expansions of one task share a slot.
	case protocol.TypeGetXCom:
		v, ok, err := s.getXComAt(str("dag_id"), str("run_id"), str("task_id"), str("key"), mapIndexOf(b))
		if err != nil {
			return nil, apiError("API_SERVER_ERROR", err.Error())
		}
		if !ok {
			v = nil
		}
		return &protocol.XComResult{Key: str("key"), Value: v}, nil
	case protocol.TypeSetXCom:
		if err := s.putXComAt(str("dag_id"), str("run_id"), str("task_id"), str("key"), mapIndexOf(b), b["value"]); err != nil {
			return nil, apiError("API_SERVER_ERROR", err.Error())
		}
		if n, ok := toInt(b["mapped_length"]); ok {
			res.MappedLength = &n
		}
		return nil, nil
	case protocol.TypeMaskSecret:
		red.add(b["value"])
		return nil, nil
	case protocol.TypeSkipDownstreamTasks:
		res.SkippedDownstream = append(res.SkippedDownstream, skippedTaskIDs(b["tasks"])...)
		show.line("supervisor", fmt.Sprintf("the task skips %v, as Airflow would mark them skipped", res.SkippedDownstream))
		return nil, nil
	case protocol.TypeGetAssetEventByAsset:
		events, err := s.assetEventsFor(b)
		if err != nil {
			return nil, apiError("API_SERVER_ERROR", err.Error())
		}
		return protocol.Raw{"type": protocol.TypeAssetEventsResult, "asset_events": events}, nil
	case protocol.TypeGetDagRunState:
		state, ok, err := s.DagRunState(str("dag_id"), str("run_id"))
		if err != nil {
			return nil, apiError("API_SERVER_ERROR", err.Error())
		}
		if !ok {
			return nil, dagRunNotFound(str("dag_id"), str("run_id"))
		}
		return &protocol.DagRunStateResult{State: state}, nil
	}
	// What Airflow's supervisor answers a known type it does not handle;
	// here it also covers the types only a real Execution API serves.
	show.line("supervisor", fmt.Sprintf("%s is not served by the local supervisor; answering Unhandled request", m.Type()))
	return nil, &protocol.ErrorResponse{Error: "API_SERVER_ERROR", Detail: map[string]any{"status_code": 400, "message": "Unhandled request"}}
}

// skippedTaskIDs reads SkipDownstreamTasks.tasks: task ids, or [task id,
// map index] pairs.
func skippedTaskIDs(v any) []string {
	list, _ := v.([]any)
	var ids []string
	for _, e := range list {
		switch e := e.(type) {
		case string:
			ids = append(ids, e)
		case []any:
			if len(e) != 2 {
				continue
			}
			if id, ok := e[0].(string); ok {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// mapIndexOf is a request's map_index, -1 when absent or null.
func mapIndexOf(b map[string]any) int {
	if n, ok := toInt(b["map_index"]); ok {
		return n
	}
	return -1
}

func toInt(v any) (int, bool) {
	switch n := v.(type) {
	case int8:
		return int(n), true
	case int16:
		return int(n), true
	case int32:
		return int(n), true
	case int64:
		return int(n), true
	case uint8:
		return int(n), true
	case uint16:
		return int(n), true
	case uint32:
		return int(n), true
	case uint64:
		return int(n), true
	case int:
		return n, true
	}
	return 0, false
}

func maps(v any) []map[string]any {
	list, _ := v.([]any)
	out := make([]map[string]any, 0, len(list))
	for _, e := range list {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// airflowLevels are the level names Airflow's supervisor accepts from a
// task's log records (structlog's NAME_TO_LEVEL).
var airflowLevels = map[string]bool{"critical": true, "exception": true, "error": true, "warn": true, "warning": true, "info": true, "debug": true, "notset": true}

func invalidLogRecord(rec map[string]any) string {
	level, ok := rec["level"].(string)
	switch {
	case !ok:
		return "no level (Airflow's supervisor fails on it)"
	case !airflowLevels[level]:
		return fmt.Sprintf("level %q is not one of Airflow's lower-case level names", level)
	}
	if ts, has := rec["timestamp"]; has && ts != nil {
		s, _ := ts.(string)
		if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
			return fmt.Sprintf("timestamp %v is not ISO 8601 (Airflow's supervisor fails on it)", ts)
		}
	}
	return ""
}

// shower writes human-readable lines to the Logs writer.
type shower struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *shower) line(source, text string) {
	if s.w == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, "%s [%s] %s\n", time.Now().UTC().Format("15:04:05.000"), source, text)
}

func (s *shower) record(rec map[string]any) {
	if s.w == nil {
		return
	}
	ts, _ := rec["timestamp"].(string)
	if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
		ts = t.UTC().Format("15:04:05.000")
	}
	var keys []string
	for k := range rec {
		switch k {
		// The task's identity is on every record; the reader knows it.
		case "event", "level", "timestamp", "logger", "dag_id", "task_id", "try_number":
		default:
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s %-7s [%v] %v", ts, strings.ToUpper(fmt.Sprint(rec["level"])), rec["logger"], rec["event"])
	for _, k := range keys {
		v := rec[k]
		if s, ok := v.(string); ok && strings.Contains(s, "\n") {
			fmt.Fprintf(&sb, "\n    %s:\n%s", k, indent(s))
			continue
		}
		fmt.Fprintf(&sb, " %s=%s", k, displayValue(v))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintln(s.w, sb.String())
}

// displayValue renders a log field for people: JSON, but without the HTML
// escaping (\u003c for <) that makes shell commands unreadable.
func displayValue(v any) string {
	var buf strings.Builder
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

func indent(s string) string {
	return "      " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n      ")
}
