package bundles

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/cleanup"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/jinja"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/schema"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
	"github.com/airflow-sandbox/airflow-go-worker/internal/exitorder"
	"github.com/airflow-sandbox/airflow-go-worker/redact"
)

const (
	// dialTimeout bounds connecting to the supervisor's two sockets.
	dialTimeout = 30 * time.Second
	// cancelGrace is how long a cancelled task may take to return (and
	// clean up, see package cleanup) before the runtime reports it failed
	// anyway, so SIGTERM always yields an outcome. Airflow's supervisor
	// escalates SIGTERM to SIGKILL after 5 s (escalation_delay) when it
	// kills a task, so the default ends well before that, or the outcome is
	// lost to the kill. CancelGraceEnv overrides it.
	cancelGrace = 4 * time.Second
	// cancelGraceEnv names the environment variable that sets the cancel
	// grace (a Go duration such as "4s"), for workers that give tasks
	// longer between SIGTERM and SIGKILL.
	cancelGraceEnv = "AIRFLOW_GO_WORKER_CANCEL_GRACE"
	// terminalWriteTimeout bounds writing the terminal frame.
	terminalWriteTimeout = 30 * time.Second
)

// protocolError is a failure to speak the coordinator protocol. Serve
// returns it without sending a terminal frame, and the process must exit
// non-zero so Airflow records failed or up_for_retry.
type protocolError struct{ Err error }

func (e *protocolError) Error() string { return "coordinator protocol: " + e.Err.Error() }
func (e *protocolError) Unwrap() error { return e.Err }

func protoErr(format string, args ...any) error {
	return &protocolError{Err: fmt.Errorf(format, args...)}
}

// serveConfig holds what tests replace.
type serveConfig struct {
	lookupEnv func(string) (string, bool)
	// environ lists the environment (os.Environ): its AIRFLOW_VAR_ secrets
	// are masked from the start (secrets.go).
	environ     []string
	signals     bool // cancel on SIGTERM/SIGINT
	cancelGrace time.Duration
	// cleanupReserve is the part of the grace kept for reporting (0:
	// cleanup.Reserve).
	cleanupReserve time.Duration
	// schema is the supervisor schema version to speak (the declared one;
	// Schema33 when empty): the runtime sends no field it lacks.
	schema        string
	schemaWarning string
	// oneP, when set, gives the task the runtime's default GOMAXPROCS
	// back once it has run for parallelismDelay.
	oneP *oneP
}

// Serve runs one task instance in coordinator mode: it dials commAddr and
// logsAddr, reads the first frame and either runs the named task and reports
// its outcome, or answers a TaskHandlerParseRequest. SIGTERM and SIGINT
// cancel the task's context. A nil return means the process should exit 0.
// A process started as a task instance runs on one P until the task has
// run for parallelismDelay (package onep, procs.go); Serve gives it the
// runtime's default back then, or when it returns before a task ran.
func (b *Bundle) Serve(ctx context.Context, commAddr, logsAddr string) error {
	exitorder.MarkServed()
	cfg := processConfig()
	cfg.oneP = startedOnOneP()
	err := b.serve(ctx, commAddr, logsAddr, cfg)
	cfg.oneP.release()
	return err
}

// processConfig is how a task process serves: the real environment,
// signals, and the cancel grace and schema it declares.
func processConfig() serveConfig {
	version, warning := schema.DeclaredWithWarning()
	grace, graceWarning := cancelGraceFromEnv(os.LookupEnv)
	if graceWarning != "" {
		warning = strings.TrimPrefix(warning+"; "+graceWarning, "; ")
	}
	return serveConfig{lookupEnv: os.LookupEnv, environ: os.Environ(), signals: true, cancelGrace: grace, schema: version, schemaWarning: warning}
}

// cancelGraceFromEnv reads CancelGraceEnv; a bad value keeps the default
// and says so.
func cancelGraceFromEnv(lookup func(string) (string, bool)) (time.Duration, string) {
	v, ok := lookup(cancelGraceEnv)
	if !ok || v == "" {
		return cancelGrace, ""
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= cleanup.Reserve {
		return cancelGrace, fmt.Sprintf("%s=%q is not a duration above %s such as \"4s\"; using %s", cancelGraceEnv, v, cleanup.Reserve, cancelGrace)
	}
	return d, ""
}

func (b *Bundle) serve(ctx context.Context, commAddr, logsAddr string, cfg serveConfig) error {
	filter, warnings := logFilterFromEnv(func(k string) string { v, _ := cfg.lookupEnv(k); return v })
	sink := newAirflowSink(filter)
	runtimeLog := newTaskLogger(sink, "airflow_go_worker")
	for _, w := range warnings {
		runtimeLog.Warn(w)
	}
	if cfg.schemaWarning != "" {
		runtimeLog.Warn(cfg.schemaWarning)
	}
	if cfg.schema == "" {
		cfg.schema = schema.Default
	}
	// Handle SIGTERM/SIGINT from the very start, so a signal during
	// start-up is a clean protocol exit rather than an abrupt kill, and one
	// during the task cancels its context.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if cfg.signals {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		defer signal.Stop(sigs)
		go func() {
			select {
			case s := <-sigs:
				runtimeLog.Warn("received a signal; cancelling the task", "signal", s.String())
				cancel(fmt.Errorf("received %v", s))
			case <-ctx.Done():
			}
		}()
	}

	comm, logs, err := dialBoth(ctx, commAddr, logsAddr)
	if err != nil {
		return err
	}
	defer comm.Close()
	defer logs.Close()
	if err := sink.Connect(logs); err != nil {
		return protoErr("writing to the logs socket %s: %v", logsAddr, err)
	}

	// firstframe.go: the slowest start Airflow's settings allow.
	wait, warning := firstFrameTimeout(cfg.lookupEnv)
	if warning != "" {
		runtimeLog.Warn(warning)
	}
	comm.SetReadDeadline(time.Now().Add(wait))
	stopWatch := context.AfterFunc(ctx, func() { comm.SetReadDeadline(time.Now()) })
	p, err := protocol.ReadFrame(comm)
	stopWatch()
	if err != nil {
		if ctx.Err() != nil {
			return protoErr("cancelled while waiting for the first frame: %v", context.Cause(ctx))
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return protoErr("the supervisor at %s sent no first frame within %s (the slowest start Airflow's [workers] execution_api_* settings allow; %s sets the bound)", commAddr, wait, firstFrameTimeoutEnv)
		}
		return protoErr("reading the first frame from %s: %v", commAddr, err)
	}
	comm.SetReadDeadline(time.Time{})
	// An asset event's extra may nest deeper than the runtime reads; only
	// a task binding into it fails (protocol.TooDeep).
	first, err := protocol.DecodeMessageCut(p)
	if err != nil {
		return protoErr("first frame: %v", err)
	}
	if e := first.ErrorResponse(); e != nil {
		return protoErr("the supervisor's first frame is an error: %v", e)
	}
	r := newRPC(comm)
	switch first.Type() {
	case protocol.TypeStartupDetails:
		sd, err := protocol.ParseStartupDetails(first.Body)
		if err != nil {
			return protoErr("%v", err)
		}
		r.start()
		return b.runTask(ctx, r, first.ID, sd, sink, cfg)
	case protocol.TypeTaskHandlerParseRequest:
		req, err := protocol.ParseTaskHandlerParseRequest(first.Body)
		if err != nil {
			return protoErr("%v", err)
		}
		r.start()
		return b.answerParse(ctx, r, first.ID, req)
	case "":
		return protoErr("the first frame has no body type; want StartupDetails or TaskHandlerParseRequest")
	default:
		return protoErr("unexpected first message type %q; want StartupDetails or TaskHandlerParseRequest", first.Type())
	}
}

// dialBoth connects to the comm socket, then the logs socket. One after the
// other, not at once as Airflow's Go SDK does: on loopback the second
// connect adds microseconds, while dialling from two goroutines made the
// runtime start a thread for each at every task start (0.26 ms of CPU per
// task in the start-up benchmark, interleaved, 81 rounds).
func dialBoth(ctx context.Context, commAddr, logsAddr string) (comm, logs net.Conn, err error) {
	// No TCP keep-alive: both peers are on this host, where a dead
	// supervisor's socket is closed by the kernel at once; the probes'
	// four setsockopt calls per socket bought nothing.
	d := net.Dialer{Timeout: dialTimeout, KeepAlive: -1}
	var logsErr error
	comm, commErr := d.DialContext(ctx, "tcp", commAddr)
	if commErr == nil {
		logs, logsErr = d.DialContext(ctx, "tcp", logsAddr)
	}
	if commErr != nil || logsErr != nil {
		if comm != nil {
			comm.Close()
		}
		if logs != nil {
			logs.Close()
		}
		if commErr != nil {
			return nil, nil, protoErr("dialing the comm socket --comm=%s: %v", commAddr, commErr)
		}
		return nil, nil, protoErr("dialing the logs socket --logs=%s: %v", logsAddr, logsErr)
	}
	return comm, logs, nil
}

// answerParse declares every registered task (spec 3.9) and waits for the
// reply; no task code runs.
func (b *Bundle) answerParse(ctx context.Context, r *rpc, id int64, req protocol.TaskHandlerParseRequest) error {
	body := &protocol.TaskHandlerParsingResult{Fileloc: req.File, TaskHandlers: map[string][]protocol.TaskHandler{}}
	want := map[string]bool{}
	for _, d := range req.DagIDs {
		want[d] = true
	}
	for _, ref := range b.refs() {
		if req.DagIDs != nil && !want[ref.DagID] {
			continue
		}
		fields := b.lookup(ref.DagID, ref.TaskID).fields
		params := make([]protocol.HandlerParam, 0, len(fields))
		for _, f := range fields {
			params = append(params, protocol.HandlerParam{Name: f.name, ExactName: true})
		}
		body.TaskHandlers[ref.DagID] = append(body.TaskHandlers[ref.DagID], protocol.TaskHandler{TaskID: ref.TaskID, Binding: "named", Params: params})
	}
	ctx, cancel := context.WithTimeout(ctx, terminalWriteTimeout)
	defer cancel()
	if _, err := r.call(ctx, body); err != nil {
		return protoErr("sending TaskHandlerParsingResult: %v", err)
	}
	return nil
}

// outcome is one finished task run.
type outcome struct {
	err     error
	removed bool
	// state holds the outlet events and rendered map index of a task
	// that ran (nil otherwise).
	state *runState
	// deadline is when the execution timeout ends (zero: none), deferrals
	// the task instance's deferrals so far: what a DeferTask carries on.
	deadline  time.Time
	deferrals int
}

func (b *Bundle) runTask(ctx context.Context, r *rpc, startupID int64, sd protocol.StartupDetails, sink *airflowSink, cfg serveConfig) error {
	ti, dr := sd.TI, sd.DagRun
	if ti.Hostname == "" {
		// Airflow's scheduler sends the task instance before any host ran
		// it (hostname null); its Python task runner fills in the host it
		// runs on, and so do we.
		ti.Hostname, _ = os.Hostname()
	}
	jsonEvents(dr.TriggeringAssetEvents)
	log := newTaskLogger(sink, "task").With("dag_id", ti.DagID, "task_id", ti.TaskID, "try_number", ti.TryNumber)
	cl := &client{rpc: r, ti: ti, lookupEnv: cfg.lookupEnv, secrets: sink.secrets, names: redact.NamesFromEnv(cfg.lookupEnv)}
	cl.maskEnvVariables(cfg.environ)

	shouldRetry := sd.ShouldRetry
	taskCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// A comm socket that fails mid-task (a malformed or oversized frame,
	// or the supervisor hanging up) leaves no way to talk to Airflow or to
	// report an outcome: stop the task now rather than let it run on.
	go func() {
		select {
		case <-r.done:
			cancel(fmt.Errorf("the comm socket failed: %w", r.failure()))
		case <-taskCtx.Done():
		}
	}()
	var out outcome
	t := b.lookup(ti.DagID, ti.TaskID)
	switch {
	case t == nil:
		log.Error("task is not registered in this bundle; reporting it removed", "registered", len(b.refs()))
		out.removed = true
	case !validUUID(ti.ID):
		// As Airflow's Go SDK does: a TI id that is not a UUID cannot be
		// Airflow's, so the task body must not run under it.
		log.Error("the task instance id from the supervisor is not a UUID; failing without running the task", "ti_id", ti.ID)
		out.err = fmt.Errorf("task instance id %q is not a UUID", ti.ID)
		shouldRetry = false
	default:
		out.deadline, out.deferrals = executionDeadline(t.executionTimeout, sd, time.Now()), ti.Deferrals
		if out.err = resumeOf(sd, &ti, log); out.err != nil {
			break
		}
		out.deferrals = ti.Deferrals
		reserve := cfg.cleanupReserve
		if reserve == 0 {
			reserve = cleanup.Reserve
		}
		runCtx, grace := cleanup.WithGraceReserve(taskCtx, cfg.cancelGrace, reserve)
		cfg.oneP.restoreAfter(parallelismDelay)
		done := make(chan outcome, 1)
		stopTimeout := withExecutionDeadline(cancel, t.executionTimeout, out.deadline)
		go func() { done <- b.execute(runCtx, t, ti, dr, sd, log, cl, sink.redact) }()
		deadline, deferrals := out.deadline, out.deferrals
		select {
		case out = <-done:
			stopTimeout()
		case <-taskCtx.Done():
			out = awaitCleanup(taskCtx, done, grace, cfg.cancelGrace, log)
		}
		out = timedOut(out, context.Cause(taskCtx))
		out.deadline, out.deferrals = deadline, deferrals
	}
	if err := r.failure(); err != nil {
		// As Airflow's Go SDK does on a protocol error: no terminal frame
		// and a non-zero exit, so Airflow records failed or up_for_retry.
		log.Error("the comm socket failed during the task; exiting without reporting an outcome", "error", err.Error())
		return protoErr("the comm socket failed during the task, so no outcome was reported (Airflow records the task failed or up_for_retry): %v", err)
	}
	out.state.finishReport(log)
	return sendTerminal(r, startupID, terminalBody(out, shouldRetry, cfg.schema, log, sink.redact))
}

// awaitCleanup waits, after the task was cancelled, for it to return
// within the cancel grace, and says in the task log whether its cleanup
// finished or was cut short. A task still running when the grace ends is
// reported failed now: Airflow kills it soon after, and the outcome must
// reach Airflow first. Its unfinished cleanup is left to the sandbox's
// server-side lifetime.
func awaitCleanup(taskCtx context.Context, done <-chan outcome, grace *cleanup.Grace, length time.Duration, log hclog.Logger) outcome {
	cancelled := time.Now()
	grace.Cancelled(cancelled)
	cause := context.Cause(taskCtx)
	select {
	case out := <-done:
		took := time.Since(cancelled).Round(time.Millisecond)
		if n := grace.Cut(); n > 0 {
			log.Warn("the task was cancelled and its cleanup cut short by the cancel grace; a sandbox left behind expires with its lifetime",
				"cause", cause.Error(), "grace", length.String(), "cleanup_steps_cut", n, "returned_after", took.String())
		} else {
			log.Info("the task was cancelled and returned within the cancel grace, its cleanup finished",
				"cause", cause.Error(), "grace", length.String(), "returned_after", took.String())
		}
		return out
	case <-time.After(length):
		log.Error("the task was cancelled and did not return within the cancel grace; reporting it failed now and cutting its cleanup short (a sandbox left behind expires with its lifetime)",
			"cause", cause.Error(), "grace", length.String())
		return outcome{err: fmt.Errorf("task did not return within the %s cancel grace after cancellation (%v)", length, cause)}
	}
}

// validUUID accepts the canonical 8-4-4-4-12 hex form Airflow sends, and
// the 32-hex-digit form without dashes.
func validUUID(s string) bool {
	switch len(s) {
	case 36:
		for i := 0; i < 36; i++ {
			if i == 8 || i == 13 || i == 18 || i == 23 {
				if s[i] != '-' {
					return false
				}
			} else if !isHexDigit(s[i]) {
				return false
			}
		}
		return true
	case 32:
		for i := 0; i < 32; i++ {
			if !isHexDigit(s[i]) {
				return false
			}
		}
		return true
	}
	return false
}

func isHexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// execute binds inputs, calls the function and pushes its result.
func (b *Bundle) execute(ctx context.Context, t *task, ti TaskInstance, dr DagRun, sd protocol.StartupDetails, log hclog.Logger, cl *client, redact func(string) string) (out outcome) {
	st := &runState{outlets: newOutlets(t.outlets, t.aliases), rpc: cl.rpc}
	defer func() {
		if p := recover(); p != nil {
			log.Error("task panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			out = outcome{err: fmt.Errorf("panic: %v", p)}
		}
		out.state = st
	}()
	cl.state = st
	if err := t.checkMapped(ti); err != nil {
		return outcome{err: err}
	}
	readFailed := false
	var sources map[string]string
	input, err := t.bindInput(ctx, bindSources{
		ref:         taskRef{DagID: ti.DagID, TaskID: ti.TaskID},
		argBindings: sd.ArgBindings,
		conf:        dr.Conf,
		xcom: func(ctx context.Context, taskID, key string) (any, error) {
			v, err := cl.GetXCom(ctx, XComRef{TaskID: taskID, Key: key})
			readFailed = readFailed || err != nil && !errors.Is(err, ErrXComNotFound)
			return v, err
		},
		mapped: func(ctx context.Context, taskID, key string) ([]any, error) {
			v, err := cl.GetMappedXComs(ctx, taskID, key)
			readFailed = readFailed || err != nil
			return v, err
		},
		mapIndex:       ti.MapIndex,
		events:         dr.TriggeringAssetEvents,
		templateValues: jinja.Values(ti, dr),
		bound:          func(s map[string]string) { sources = s },
	})
	if err == nil && t.inputType != nil {
		err = t.reportInputs(ctx, st, input, sources, log, cl)
	}
	if err != nil {
		err = fmt.Errorf("binding inputs: %w", err)
		if !readFailed {
			// A value that does not fit, a conf key the task does not
			// allow, an upstream that pushed nothing: the same inputs
			// bind the same way on every try. Only a failed read of an
			// XCom may pass.
			err = FailNoRetry(err)
		}
		return outcome{err: err}
	}
	result, has, err := t.call(invocation{ctx: ctx, ti: ti, dagRun: dr, logger: log, client: cl, input: input, outlets: st.outlets})
	if err != nil {
		return outcome{err: err}
	}
	feeds := ti.MapIndex < 0 && b.feedsMapping(ti.DagID, ti.TaskID, t)
	if feeds && !has {
		return outcome{err: FailNoRetry(errors.New("a mapped task expands over this task's return value, but the task returned none; return the list to map over"))}
	}
	if len(t.branch) > 0 {
		push, err := applyBranch(ctx, cl, &t.attributes, result, has, log)
		if err != nil {
			return outcome{err: err}
		}
		has = has && push
	}
	if has && t.multipleOutputs {
		if err := pushMultipleOutputs(ctx, cl, result); err != nil {
			return outcome{err: err}
		}
	}
	if has {
		if err := cl.setXCom(ctx, protocol.ReturnValueKey, result, feeds); err != nil {
			// Downstream tasks depend on this value; a task whose result was
			// lost has not succeeded.
			return outcome{err: fmt.Errorf("pushing the return value: %w", err)}
		}
	}
	return outcome{}
}

// terminalBody is the outcome as the terminal message of the given
// supervisor schema version: only 2026-10-30 (Airflow 3.4) has
// TaskState.retry_reason, so a failure's reason goes there only then; on
// 3.3 it is in the task log.
//
// A task chooses its outcome with its error: a *SkipError ends it skipped,
// a final error (one wrapping ErrFailNoRetry: the task's choice, or an
// error this module knows retrying cannot fix) failed even with retries
// left. Both are TaskState messages, which Airflow honours because the
// process exits 0. This is the one place an error becomes an outcome.
func terminalBody(out outcome, shouldRetry bool, version string, log hclog.Logger, redact func(string) string) protocol.Body {
	now := time.Now().UTC()
	mapIndex := maskedMapIndex(out.state, redact)
	var skip *skipError
	var def *deferral
	noRetry := errors.Is(out.err, ErrFailNoRetry)
	switch {
	case out.removed:
		return &protocol.TaskState{State: "removed", EndDate: now}
	case errors.As(out.err, &def):
		return deferBody(def, now, out.deadline, out.deferrals, mapIndex, log)
	case errors.As(out.err, &skip):
		log.Info("task skipped", "reason", skip.Reason)
		return &protocol.TaskState{State: "skipped", EndDate: now, RenderedMapIndex: mapIndex}
	case out.err != nil && shouldRetry && !noRetry:
		log.Error("task failed; Airflow will retry it", "error", out.err.Error())
		return &protocol.RetryTask{EndDate: now, RetryReason: redact(out.err.Error()), RenderedMapIndex: mapIndex}
	case out.err != nil:
		msg := "task failed"
		if noRetry && shouldRetry {
			msg = "task failed; not retried, since retrying cannot fix this error (ErrFailNoRetry)"
		}
		log.Error(msg, "error", out.err.Error())
		body := &protocol.TaskState{State: "failed", EndDate: now, RenderedMapIndex: mapIndex}
		if schema.AtLeast(version, schema.V34) {
			reason := redact(out.err.Error())
			body.RetryReason = &reason
		}
		return body
	}
	var outlets *Outlets
	if out.state != nil {
		outlets = out.state.outlets
	}
	profiles, events := outlets.terminal()
	if len(profiles) > 0 {
		log.Info("task succeeded", "asset_outlets", len(profiles), "outlet_events", len(events))
	} else {
		log.Info("task succeeded")
	}
	return &protocol.SucceedTask{EndDate: now, TaskOutlets: profiles, OutletEvents: events, RenderedMapIndex: mapIndex}
}

// sendTerminal writes the terminal frame with the StartupDetails frame's id
// (0 from Airflow) and does not wait for the reply, as Airflow's Go SDK does.
func sendTerminal(r *rpc, id int64, body protocol.Body) error {
	if err := r.send(id, body); err != nil {
		if errors.Is(err, net.ErrClosed) {
			return protoErr("the comm socket closed before the %s frame could be sent", body.MessageType())
		}
		return protoErr("sending %s: %v", body.MessageType(), err)
	}
	return nil
}
