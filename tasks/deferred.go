package tasks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	"github.com/airflow-sandbox/airflow-go-worker/redact"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// Deferrable run and convert (docs/deferral.md): each command starts
// detached in the sandbox and the task defers; every resume (on any
// worker) polls it once, appends its new output to the task log, and
// defers again, starts the next command or finishes as the task does
// without deferral.

// DefaultPollInterval is how long a deferrable task waits between polls.
const DefaultPollInterval = 30 * time.Second

// maxPartialLine is how much of an unfinished line a poll leaves for the
// next: past it the piece is logged as a line of its own.
const maxPartialLine = 64 << 10

// deferredState is what a deferrable task carries from one resume to the
// next (bundles.Defer's state, TaskInstance.Resumed).
type deferredState struct {
	SandboxID string `json:"sandbox_id"`
	Backend   string `json:"backend,omitempty"`
	ConnID    string `json:"conn_id,omitempty"`
	// Step is the running command's index in the task's list; Detached
	// its detached id, Offsets how much of its output is logged.
	Step     int             `json:"step"`
	Detached string          `json:"detached"`
	Offsets  sandbox.Offsets `json:"offsets"`
	Started  time.Time       `json:"started"`
	Tail     string          `json:"tail,omitempty"`
	Dropped  int64           `json:"output_lines_dropped,omitempty"`
	// LogUsed and LogFull are the task's log budget so far
	// (CommandLogLimitEnv counts the whole task, not one resume).
	LogUsed int64 `json:"log_used,omitempty"`
	LogFull bool  `json:"log_full,omitempty"`
}

func (st deferredState) ref() SandboxRef {
	return SandboxRef{ID: st.SandboxID, Backend: st.Backend, ConnID: st.ConnID}
}

// deferredJob is the commands a deferrable task runs and how.
type deferredJob struct {
	commands     Commands
	timeout      time.Duration
	env          map[string]string
	workdir      string
	poll         time.Duration
	allowFailure bool
	allowHint    bool // the run task's CommandError advises allow_failure
	red          *redact.Set
	budget       *logBudget
}

// deferrable checks what a deferrable task needs before it does
// anything, and reads a resume's state (nil on a first run).
func deferrable(d Deps, poll Duration) (time.Duration, *deferredState, error) {
	if d.Defer == nil {
		return 0, nil, final.Errorf("deferrable: this task cannot defer (its Deps has no Defer: run it through catalogue.Adapt, which gives it bundles.Defer)")
	}
	p := time.Duration(poll)
	if p == 0 {
		p = DefaultPollInterval
	}
	if p < time.Second {
		return 0, nil, final.Errorf("poll_interval: %s is shorter than a second; each poll forks a task process and asks the sandbox once, so give 1s or more (default %s)", p, DefaultPollInterval)
	}
	if d.Resumed == "" {
		return p, nil, nil
	}
	var st deferredState
	if err := json.Unmarshal([]byte(d.Resumed), &st); err != nil || st.SandboxID == "" || st.Detached == "" {
		return 0, nil, final.Errorf("the deferred task's resume state %q is not what this task deferred with (%v); clear the task instance to run it afresh", d.Resumed, err)
	}
	return p, &st, nil
}

// refuseHostBound fails a deferrable task on a backend a resume elsewhere
// could not reach (local, unless the operator says resumes stay).
func refuseHostBound(b *sandbox.Backend) error {
	if err := b.DeferralRefusal(); err != nil {
		return final.Mark(err)
	}
	return nil
}

// start starts command st.Step detached, recording it in st.
func (j deferredJob) start(ctx context.Context, d Deps, sb *sandbox.Sandbox, st *deferredState) error {
	cmd := j.commands[st.Step]
	id, err := sb.StartDetached(ctx, cmd, sandbox.DetachedOptions{Env: j.env, Workdir: j.workdir})
	if err != nil {
		return fmt.Errorf("starting %q in %s: %w", cmd, sb, err)
	}
	d.logger().Info("running detached; the task defers between polls", "sandbox", sb.ID(), "command", cmd, "poll_interval", j.poll.String())
	st.Detached, st.Offsets, st.Started = id, sandbox.Offsets{}, time.Now().UTC()
	return nil
}

// resume polls the running command and logs its new output. It returns
// the state to defer with while a command runs (the next one started
// when one ended well), or how the last command ended.
func (j deferredJob) resume(ctx context.Context, d Deps, sb *sandbox.Sandbox, st deferredState) (RunResult, *deferredState, error) {
	j.budget.resumeFrom(st.LogUsed, st.LogFull)
	status, err := j.pollAll(ctx, sb, d, &st)
	st.LogUsed, st.LogFull = j.budget.spent()
	cmd := j.commands[st.Step]
	if errors.Is(err, sandbox.ErrGone) {
		return RunResult{}, nil, final.Errorf("sandbox %s is gone (destroyed or expired) while its command %q ran detached, so its outcome is lost; the task fails: %v", sb.ID(), cmd, err)
	}
	if err != nil {
		return RunResult{}, nil, fmt.Errorf("polling %q in %s: %w", cmd, sb, err)
	}
	lines, _ := j.budget.dropped()
	st.Dropped += lines
	res := RunResult{ExitCode: status.ExitCode, OutputTail: st.Tail, OutputLinesDropped: st.Dropped}
	if status.Running {
		if j.timeout <= 0 || time.Since(st.Started) < j.timeout {
			return res, &st, nil
		}
		if err := sb.StopDetached(ctx, st.Detached); err != nil {
			d.logger().Warn("could not stop the timed-out command", "error", err)
		}
		res.ExitCode, res.TimedOut = -1, true
	}
	d.logger().Info("command finished", "exit_code", res.ExitCode, "timed_out", res.TimedOut, "duration", time.Since(st.Started).Round(time.Second).String())
	if res.ExitCode != 0 || res.TimedOut {
		if !j.allowFailure {
			return res, nil, &CommandError{Command: cmd, Result: res, AllowHint: j.allowHint}
		}
		d.logger().Warn("command failed; continuing because allow_failure is set", "command", cmd, "exit_code", res.ExitCode, "timed_out", res.TimedOut)
		return res, nil, nil
	}
	if st.Step+1 < len(j.commands) {
		st.Step++
		return res, &st, j.start(ctx, d, sb, &st)
	}
	return res, nil, nil
}

// pollAll polls once, and again at once while an ended command's output
// is not all read, logging it; st moves past what was logged.
func (j deferredJob) pollAll(ctx context.Context, sb *sandbox.Sandbox, d Deps, st *deferredState) (sandbox.DetachedStatus, error) {
	for {
		status, err := sb.PollDetached(ctx, st.Detached, st.Offsets, sandbox.DefaultPollBytes)
		if err != nil {
			return status, err
		}
		j.logOutput(d, st, status)
		more := len(status.Stdout) == sandbox.DefaultPollBytes || len(status.Stderr) == sandbox.DefaultPollBytes
		if status.Running || !more {
			return status, nil
		}
	}
}

// logOutput logs the whole lines of what a poll read (everything once
// the command has ended, or an unfinished line past maxPartialLine),
// masked, and moves st's offsets past exactly that: a line is logged
// once, whole, whichever resume reads its end.
func (j deferredJob) logOutput(d Deps, st *deferredState, status sandbox.DetachedStatus) {
	tail := newOutputTail(DefaultOutputTail)
	_, _ = tail.buf.Write([]byte(st.Tail))
	for _, s := range []struct {
		name string
		data []byte
		off  *int64
	}{{"stdout", status.Stdout, &st.Offsets.Stdout}, {"stderr", status.Stderr, &st.Offsets.Stderr}} {
		take := s.data
		if status.Running {
			if i := bytes.LastIndexByte(take, '\n'); i >= 0 {
				take = take[:i+1]
			} else if len(take) < maxPartialLine {
				take = nil
			}
		}
		if len(take) == 0 {
			continue
		}
		ll := newLineLogger(d.logger(), s.name, j.red)
		ll.tail, ll.budget = tail, j.budget
		_, _ = ll.Write(take)
		ll.Flush()
		*s.off += int64(len(take))
	}
	out := tail.buf.String()
	if tail.buf.Truncated() {
		if i := strings.IndexByte(out, '\n'); i >= 0 {
			out = out[i+1:]
		}
	}
	st.Tail = j.red.String(out)
}
