package fakemodal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"strings"
	"sync"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// fsToolsPath is the binary the SDK's filesystem API execs.
const fsToolsPath = "/__modal/.bin/modal-sandbox-fs-tools"

// fakeExec is one command started through TaskExecStart.
type fakeExec struct {
	id             string
	stdout, stderr *outBuf

	// Stdin is an OS pipe, so the exec driver hands it to the process as a
	// file and never waits on a copy of it: Modal clients may leave an
	// exec's stdin open forever.
	stdinMu     sync.Mutex
	stdinR      *os.File
	stdinW      *os.File
	stdinOff    uint64
	stdinClosed bool
	stdinOnce   sync.Once

	exited chan struct{} // closed once code or signal is set
	code   *int32
	signal *int32
	cancel context.CancelFunc
}

func (e *fakeExec) exit(code, signal *int32) {
	e.code, e.signal = code, signal
	close(e.exited)
	go e.release()
}

type router struct {
	pb.UnimplementedTaskCommandRouterServer
	s *Server
}

func (r *router) task(taskID string) (*fakeSandbox, error) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	sb := r.s.byTask[taskID]
	if sb == nil {
		return nil, status.Errorf(codes.NotFound, "task %s not found", taskID)
	}
	return sb, nil
}

func (r *router) exec(taskID, execID string) (*fakeSandbox, *fakeExec, error) {
	sb, err := r.task(taskID)
	if err != nil {
		return nil, nil, err
	}
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	e := sb.execs[execID]
	if e == nil {
		return nil, nil, status.Errorf(codes.NotFound, "exec %s not found in task %s", execID, taskID)
	}
	return sb, e, nil
}

func (r *router) TaskExecStart(ctx context.Context, req *pb.TaskExecStartRequest) (*pb.TaskExecStartResponse, error) {
	sb, err := r.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	args := req.GetCommandArgs()
	if len(args) == 0 {
		return nil, status.Error(codes.InvalidArgument, "empty command")
	}
	r.s.mu.Lock()
	if sb.result != nil {
		r.s.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "task %s has finished", sb.taskID)
	}
	if r.s.closed {
		r.s.mu.Unlock()
		return nil, errShuttingDown
	}
	if _, dup := sb.execs[req.GetExecId()]; dup { // a retried start
		r.s.mu.Unlock()
		return &pb.TaskExecStartResponse{}, nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		r.s.mu.Unlock()
		return nil, status.Errorf(codes.Internal, "fakemodal: stdin pipe: %v", err)
	}
	execCtx, cancel := context.WithCancel(sb.ctx)
	e := &fakeExec{
		id: req.GetExecId(), stdout: newOutBuf(execCtx.Done()), stderr: newOutBuf(execCtx.Done()),
		stdinR: pr, stdinW: pw, exited: make(chan struct{}), cancel: cancel,
	}
	sb.execs[e.id] = e
	rec := ExecRecord{SandboxID: sb.id, Args: append([]string(nil), args...)}
	r.s.execs = append(r.s.execs, rec)
	r.s.work.Add(1) // done by runFSTool, runCommand or failInjected, started below
	injected := r.s.failCommand != nil && r.s.failCommand(maps.Clone(sb.tags), rec.Args)
	if injected {
		r.s.failedCommands = append(r.s.failedCommands, rec)
	}
	code := r.s.failCode
	r.s.mu.Unlock()
	if injected {
		go r.s.failInjected(e, code)
		return &pb.TaskExecStartResponse{}, nil
	}

	env := map[string]string{}
	for k, v := range sb.env {
		env[k] = v
	}
	for _, src := range req.GetSecretSources() {
		for k, v := range src.GetEnv().GetContents() {
			env[k] = v
		}
	}
	for k, v := range req.GetEnv() {
		env[k] = v
	}
	var out, errw io.Writer = e.stdout, e.stderr
	if req.GetStdoutConfig() == pb.TaskExecStdoutConfig_TASK_EXEC_STDOUT_CONFIG_DEVNULL {
		out = io.Discard
	}
	switch req.GetStderrConfig() {
	case pb.TaskExecStderrConfig_TASK_EXEC_STDERR_CONFIG_DEVNULL:
		errw = io.Discard
	case pb.TaskExecStderrConfig_TASK_EXEC_STDERR_CONFIG_STDOUT:
		errw = out
	}
	timeout := time.Duration(req.GetTimeoutSecs()) * time.Second
	if args[0] == fsToolsPath {
		go r.s.runFSTool(execCtx, sb, e, args)
		return &pb.TaskExecStartResponse{}, nil
	}
	go r.s.runCommand(execCtx, sb, e, shellJoin(args), sandbox.ExecRequest{
		Timeout: timeout, Env: env, Workdir: req.GetWorkdir(), Stdin: pr, Stdout: out, Stderr: errw,
	})
	return &pb.TaskExecStartResponse{}, nil
}

func (s *Server) runCommand(ctx context.Context, sb *fakeSandbox, e *fakeExec, cmd string, req sandbox.ExecRequest) {
	defer s.work.Done()
	defer e.cancel()
	// Modal's exec timeout ends the command (the fake kills its whole
	// namespace); what the command leaves in the background otherwise runs
	// until the sandbox ends (lingering.go).
	if req.Timeout > 0 {
		stop := time.AfterFunc(req.Timeout, e.cancel).Stop
		defer stop()
	}
	req.Timeout = max(time.Until(sb.created.Add(sb.timeout))+time.Second, time.Second)
	marker := newMarker()
	out, errw := newMarkerScanner(req.Stdout, marker), newMarkerScanner(req.Stderr, marker)
	req.Command, req.Stdout, req.Stderr = lingeringCommand(cmd, marker), out, errw
	type execEnd struct {
		res sandbox.ExecResult
		err error
	}
	done := make(chan execEnd, 1)
	go func() {
		res, err := s.exec.Exec(ctx, sb.execID, req)
		done <- execEnd{res, err}
	}()
	outFound, errFound := out.found, errw.found
	var code int
	for outFound != nil || errFound != nil {
		select {
		case code = <-outFound:
			outFound = nil
		case code = <-errFound:
			errFound = nil
		case end := <-done:
			// It ended without reporting: killed, timed out, or it failed
			// to start.
			out.flush()
			errw.flush()
			s.endCommand(ctx, sb, e, end.res, end.err)
			return
		}
	}
	e.closeStdin()
	e.stdout.close()
	e.stderr.close()
	e.exit(int32p(int32(code)), nil)
	<-done // its background processes have ended, or the sandbox has
}

// endCommand reports a command whose exec ended before the command could
// report its status.
func (s *Server) endCommand(ctx context.Context, sb *fakeSandbox, e *fakeExec, res sandbox.ExecResult, err error) {
	dead := sb.isDone() || ctx.Err() != nil
	if err != nil && !dead {
		// Before stderr closes, or the reason is lost.
		fmt.Fprintf(e.stderr, "fakemodal: %v\n", err)
	}
	e.closeStdin()
	e.stdout.close()
	e.stderr.close()
	switch {
	case dead:
		e.exit(nil, int32p(9)) // the sandbox died under the command, or Modal's timeout killed it
	case err != nil:
		e.exit(int32p(126), nil)
	case res.TimedOut:
		e.exit(nil, int32p(9)) // Modal SIGKILLs a command past its timeout
	default:
		e.exit(int32p(int32(res.ExitCode)), nil)
	}
}

// failInjected ends a command FailCommands picked, without running it.
func (s *Server) failInjected(e *fakeExec, code int32) {
	defer s.work.Done()
	defer e.cancel()
	fmt.Fprintf(e.stderr, "fakemodal: this command was failed on purpose (FailCommands): exit %d\n", code)
	e.closeStdin()
	e.stdout.close()
	e.stderr.close()
	e.exit(int32p(code), nil)
}

func int32p(v int32) *int32 { return &v }

// shellJoin quotes argv for sh -c, since the exec driver takes a command line.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

func (r *router) TaskExecWait(ctx context.Context, req *pb.TaskExecWaitRequest) (*pb.TaskExecWaitResponse, error) {
	_, e, err := r.exec(req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	select {
	case <-e.exited:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if e.signal != nil {
		return pb.TaskExecWaitResponse_builder{Signal: e.signal}.Build(), nil
	}
	return pb.TaskExecWaitResponse_builder{Code: e.code}.Build(), nil
}

// TaskExecPoll is TaskExecWait without the wait: the exit status once the
// command has ended, neither code nor signal while it runs.
func (r *router) TaskExecPoll(ctx context.Context, req *pb.TaskExecPollRequest) (*pb.TaskExecPollResponse, error) {
	_, e, err := r.exec(req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	select {
	case <-e.exited:
	default:
		return &pb.TaskExecPollResponse{}, nil
	}
	if e.signal != nil {
		return pb.TaskExecPollResponse_builder{Signal: e.signal}.Build(), nil
	}
	return pb.TaskExecPollResponse_builder{Code: e.code}.Build(), nil
}

func (r *router) TaskExecStdioRead(req *pb.TaskExecStdioReadRequest, stream grpc.ServerStreamingServer[pb.TaskExecStdioReadResponse]) error {
	_, e, err := r.exec(req.GetTaskId(), req.GetExecId())
	if err != nil {
		return err
	}
	buf := e.stdout
	if req.GetFileDescriptor() == pb.TaskExecStdioFileDescriptor_TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR {
		buf = e.stderr
	}
	r.s.mu.Lock()
	dropAfter := int64(-1)
	if r.s.dropCount > 0 {
		r.s.dropCount--
		dropAfter = r.s.dropAfter
	}
	r.s.mu.Unlock()
	off := int64(req.GetOffset())
	var sent int64
	for {
		max := 1 << 20
		if dropAfter >= 0 {
			if sent >= dropAfter {
				return status.Error(codes.Unavailable, "fakemodal: injected stdio stream drop")
			}
			if left := dropAfter - sent; left < int64(max) {
				max = int(left)
			}
		}
		data, eof, err := buf.read(stream.Context(), off, max)
		if err != nil {
			return err
		}
		if eof {
			return nil
		}
		if err := stream.Send(pb.TaskExecStdioReadResponse_builder{Data: data}.Build()); err != nil {
			return err
		}
		off += int64(len(data))
		sent += int64(len(data))
		buf.ack(off)
	}
}

func (r *router) TaskExecStdinWrite(ctx context.Context, req *pb.TaskExecStdinWriteRequest) (*pb.TaskExecStdinWriteResponse, error) {
	_, e, err := r.exec(req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	if err := e.writeStdin(ctx, req.GetOffset(), req.GetData(), req.GetEof()); err != nil {
		return nil, err
	}
	return &pb.TaskExecStdinWriteResponse{}, nil
}

func (r *router) TaskExecStdinStatus(ctx context.Context, req *pb.TaskExecStdinStatusRequest) (*pb.TaskExecStdinStatusResponse, error) {
	_, e, err := r.exec(req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	e.stdinMu.Lock()
	defer e.stdinMu.Unlock()
	return pb.TaskExecStdinStatusResponse_builder{NumBytesWritten: e.stdinOff, Closed: e.stdinClosed}.Build(), nil
}

func (r *router) TaskExecStdinWriteStream(stream grpc.ClientStreamingServer[pb.TaskExecStdinWriteStreamRequest, pb.TaskExecStdinWriteStreamResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return status.Error(codes.InvalidArgument, "the first stdin stream message must be start")
	}
	_, e, err := r.exec(start.GetTaskId(), start.GetExecId())
	if err != nil {
		return err
	}
	off := start.GetOffset()
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			return stream.SendAndClose(&pb.TaskExecStdinWriteStreamResponse{})
		}
		if err != nil {
			return err
		}
		switch msg.WhichPayload() {
		case pb.TaskExecStdinWriteStreamRequest_Data_case:
			if err := e.writeStdin(stream.Context(), off, msg.GetData(), false); err != nil {
				return err
			}
			off += uint64(len(msg.GetData()))
		case pb.TaskExecStdinWriteStreamRequest_End_case:
			if err := e.writeStdin(stream.Context(), off, nil, true); err != nil {
				return err
			}
			return stream.SendAndClose(&pb.TaskExecStdinWriteStreamResponse{})
		}
	}
}

// closeStdin drops the read end once the command is over, so a writer
// blocked on a full pipe fails instead of hanging.
func (e *fakeExec) closeStdin() {
	e.stdinOnce.Do(func() { e.stdinR.Close() })
}

// release closes both ends of stdin once the command is over.
func (e *fakeExec) release() {
	e.closeStdin()
	e.stdinMu.Lock()
	defer e.stdinMu.Unlock()
	if !e.stdinClosed {
		e.stdinClosed = true
		e.stdinW.Close()
	}
}

// writeStdin writes data at offset (skipping bytes already written, as a
// retry resends them) and closes stdin on eof. It fails with
// FailedPrecondition once the command has exited, which the SDK reads as
// "the binary exited early".
func (e *fakeExec) writeStdin(ctx context.Context, offset uint64, data []byte, eof bool) error {
	e.stdinMu.Lock()
	defer e.stdinMu.Unlock()
	if offset > e.stdinOff {
		return status.Errorf(codes.InvalidArgument, "stdin offset %d is past the %d bytes written", offset, e.stdinOff)
	}
	if skip := e.stdinOff - offset; skip > 0 {
		if skip >= uint64(len(data)) {
			data = nil
		} else {
			data = data[skip:]
		}
	}
	if len(data) > 0 {
		if e.stdinClosed {
			return status.Error(codes.FailedPrecondition, "stdin is closed")
		}
		done := make(chan error, 1)
		go func() { _, err := e.stdinW.Write(data); done <- err }()
		select {
		case err := <-done:
			if err != nil {
				return status.Errorf(codes.FailedPrecondition, "the command no longer reads stdin: %v", err)
			}
		case <-e.exited:
			// Not on ctx.Done: a write that lands after we answered would
			// be lost to the offset count and duplicated by the resend.
			e.closeStdin()
			<-done
			return status.Error(codes.FailedPrecondition, "the command has exited")
		}
		e.stdinOff += uint64(len(data))
	}
	if eof && !e.stdinClosed {
		e.stdinClosed = true
		e.stdinW.Close()
	}
	return nil
}

// outBuf holds one output stream of a command. Readers resume by offset,
// and output stays readable after the command exits. Memory is bounded:
// bytes a reader has received are dropped (bar a small tail for resumes),
// and the command blocks once outCap unread bytes are waiting.
type outBuf struct {
	mu     sync.Mutex
	data   []byte
	base   int64 // offset of data[0]
	acked  int64 // highest offset a reader has received
	closed bool
	notify chan struct{}
	abort  <-chan struct{}
}

const (
	outCap  = 8 << 20
	outTail = 1 << 20
)

func newOutBuf(abort <-chan struct{}) *outBuf {
	return &outBuf{notify: make(chan struct{}), abort: abort}
}

func (b *outBuf) broadcastLocked() {
	close(b.notify)
	b.notify = make(chan struct{})
}

func (b *outBuf) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		b.mu.Lock()
		unread := b.base + int64(len(b.data)) - b.acked
		if unread >= outCap {
			ch := b.notify
			b.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-b.abort:
				return 0, errors.New("command cancelled")
			}
		}
		chunk := p
		if room := outCap - unread; int64(len(chunk)) > room {
			chunk = chunk[:room]
		}
		b.data = append(b.data, chunk...)
		p = p[len(chunk):]
		b.broadcastLocked()
		b.mu.Unlock()
	}
	return n, nil
}

func (b *outBuf) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	b.broadcastLocked()
}

func (b *outBuf) read(ctx context.Context, off int64, max int) ([]byte, bool, error) {
	for {
		b.mu.Lock()
		if off < b.base {
			b.mu.Unlock()
			return nil, false, status.Errorf(codes.OutOfRange, "offset %d was already consumed (kept from %d)", off, b.base)
		}
		if end := b.base + int64(len(b.data)); off < end {
			chunk := b.data[off-b.base:]
			if len(chunk) > max {
				chunk = chunk[:max]
			}
			out := append([]byte(nil), chunk...)
			b.mu.Unlock()
			return out, false, nil
		}
		if b.closed {
			b.mu.Unlock()
			return nil, true, nil
		}
		ch := b.notify
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, false, status.FromContextError(ctx.Err()).Err()
		}
	}
}

// ack records that a reader received everything before off, and drops what
// no resume can need.
func (b *outBuf) ack(off int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if off <= b.acked {
		return
	}
	b.acked = off
	if drop := b.acked - outTail - b.base; drop > 0 {
		b.data = b.data[drop:] // append reallocates later, freeing the dropped head
		b.base += drop
	}
	b.broadcastLocked()
}
