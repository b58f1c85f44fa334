package tasks

import (
	"context"
	"fmt"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// runDeferred is RunCommands with deferrable: true, in the sandbox
// openRef opened.
func runDeferred(ctx context.Context, d Deps, in RunInput, sb *sandbox.Sandbox, backend *sandbox.Backend, job deferredJob) (RunResult, error) {
	poll, st, err := deferrable(d, in.PollInterval)
	if err != nil {
		return RunResult{}, err
	}
	if err := refuseHostBound(backend); err != nil {
		return RunResult{}, err
	}
	job.poll, job.allowFailure, job.allowHint = poll, in.AllowFailure, true
	if st == nil {
		st = &deferredState{SandboxID: sb.ID(), Backend: backend.Name(), ConnID: in.ConnID}
		if err := job.start(ctx, d, sb, st); err != nil {
			return RunResult{}, err
		}
		return RunResult{}, d.Defer(poll, *st)
	}
	if st.SandboxID != sb.ID() {
		return RunResult{}, final.Errorf("the deferred task resumed with sandbox %s bound, but it started its command in %s; clear the task instance to run it afresh", sb.ID(), st.SandboxID)
	}
	res, next, err := job.resume(ctx, d, sb, *st)
	if err == nil && next != nil {
		err = d.Defer(poll, *next)
	}
	return res, err
}

// convertDeferred is Convert with deferrable: true: provision and start
// the first command, then resume by resume until the last one ends; the
// sandbox is destroyed when the task finishes, fails or cannot defer,
// never when it defers.
func convertDeferred(ctx context.Context, d Deps, in ConvertInput, plan exportPlan, limit int64) (res ConvertResult, err error) {
	poll, st, err := deferrable(d, in.PollInterval)
	if err != nil {
		return ConvertResult{}, err
	}
	job := deferredJob{commands: in.Command, timeout: time.Duration(in.Timeout), poll: poll, budget: newLogBudget(limit)}
	var sb *sandbox.Sandbox
	var next *deferredState
	if st == nil {
		p, perr := provision(ctx, d, in.ProvisionInput)
		if perr != nil {
			return ConvertResult{}, perr
		}
		defer p.backend.Close()
		sb, job.red = p.sandbox, newRedactor(p.secrets)
		d.logger().Info("sandbox ready", "backend", p.record.Backend, "id", p.record.ID)
		next = &deferredState{SandboxID: p.record.ID, Backend: p.record.Backend, ConnID: in.ConnID}
		if err = refuseHostBound(p.backend); err == nil {
			err = job.start(ctx, d, sb, next)
		}
	} else {
		var backend *sandbox.Backend
		var tags map[string]string
		if sb, backend, tags, err = openRef(ctx, d, in.BackendOptions, st.ref(), ""); err != nil {
			return ConvertResult{}, fmt.Errorf("resuming the conversion: %w", err)
		}
		defer backend.Close()
		secrets, serr := sandboxSecrets(ctx, d, sb.ID(), tags)
		if serr != nil {
			return ConvertResult{}, fmt.Errorf("%w (%s)", serr, destroyQuietly(ctx, d, sb))
		}
		job.red = newRedactor(secrets)
		var run RunResult
		run, next, err = job.resume(ctx, d, sb, *st)
		res = convertResult(nil, run)
	}
	return finishConvert(ctx, d, sb, plan, res, next, poll, err)
}

// finishConvert defers while a command runs; otherwise it exports after
// the last command succeeded, and destroys the sandbox.
func finishConvert(ctx context.Context, d Deps, sb *sandbox.Sandbox, plan exportPlan, res ConvertResult, next *deferredState, poll time.Duration, err error) (ConvertResult, error) {
	if err == nil && next != nil {
		return res, d.Defer(poll, *next)
	}
	defer destroyQuietly(ctx, d, sb)
	if err != nil {
		if _, ok := err.(*CommandError); ok {
			err = fmt.Errorf("conversion failed, nothing was exported: %w", err)
		}
		return res, err
	}
	urls, err := exportFrom(ctx, d, sb, plan)
	if err != nil {
		return res, err
	}
	return ConvertResult{URLs: urls, ExitCode: res.ExitCode, OutputTail: res.OutputTail, OutputLinesDropped: res.OutputLinesDropped}, nil
}
