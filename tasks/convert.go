package tasks

import (
	"context"
	"fmt"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
)

// ConvertInput is a whole artifact conversion job: the sandbox to create
// (ProvisionInput's fields, promoted), the commands and the outputs to export.
type ConvertInput struct {
	// ProvisionInput describes the sandbox and the inputs staged into it.
	ProvisionInput

	Command      Commands          `json:"command"`
	Timeout      Duration          `json:"timeout,omitempty"`
	Exports      map[string]string `json:"exports"`
	ExportConnID string            `json:"export_conn_id,omitempty"`
	MaxBytes     int64             `json:"max_bytes,omitempty"`
	// SHA256 computes each exported file's SHA-256 (ExportInput.SHA256).
	SHA256 bool `json:"sha256,omitempty"`
	// Deferrable and PollInterval: RunInput's.
	Deferrable   bool     `json:"deferrable,omitempty"`
	PollInterval Duration `json:"poll_interval,omitempty"`
}

// ConvertResult is what a conversion produced.
type ConvertResult struct {
	URLs       []string `json:"urls"`
	ExitCode   int      `json:"exit_code"`
	OutputTail string   `json:"output_tail"`
	// OutputLinesDropped: RunResult.OutputLinesDropped.
	OutputLinesDropped int64 `json:"output_lines_dropped,omitempty"`
}

// Convert provisions a sandbox, stages the inputs in, runs the commands,
// exports the outputs and destroys the sandbox, always. Nothing is exported
// unless every command succeeded.
func Convert(ctx context.Context, d Deps, in ConvertInput) (ConvertResult, error) {
	if err := d.check(); err != nil {
		return ConvertResult{}, err
	}
	if len(in.Command) == 0 {
		return ConvertResult{}, final.Errorf("command: nothing to run; give the conversion command")
	}
	// One storage handle for the task: a bucket the inputs come from and
	// the outputs go to is opened once.
	d, done := d.withStorage()
	defer done()
	// Check the outputs, and resolve their connection, before paying for a
	// sandbox: a mistake there would otherwise surface only after the
	// conversion ran, once per retry.
	plan, err := planExport(ctx, d, in.Exports, in.ExportConnID, in.MaxBytes)
	if err != nil {
		return ConvertResult{}, err
	}
	plan.sha256 = in.SHA256
	limit, err := commandLogLimit()
	if err != nil {
		return ConvertResult{}, err
	}
	if in.Deferrable {
		return convertDeferred(ctx, d, in, plan, limit)
	}
	p, err := provision(ctx, d, in.ProvisionInput)
	if err != nil {
		return ConvertResult{}, err
	}
	defer p.backend.Close()
	sb := p.sandbox
	defer destroyQuietly(ctx, d, sb)
	d.logger().Info("sandbox ready", "backend", p.record.Backend, "id", p.record.ID)
	var res RunResult
	budget := newLogBudget(limit)
	for _, cmd := range in.Command {
		res, err = runOne(ctx, d, sb, cmd, execOptions(in.Timeout, nil, ""), newRedactor(p.secrets), budget)
		if err != nil {
			return convertResult(nil, res), err
		}
		if res.ExitCode != 0 || res.TimedOut {
			return convertResult(nil, res),
				fmt.Errorf("conversion failed, nothing was exported: %w", &CommandError{Command: cmd, Result: res})
		}
	}
	urls, err := exportFrom(ctx, d, sb, plan)
	if err != nil {
		return convertResult(nil, res), err
	}
	return convertResult(urls, res), nil
}

func convertResult(urls []string, res RunResult) ConvertResult {
	return ConvertResult{URLs: urls, ExitCode: res.ExitCode, OutputTail: res.OutputTail, OutputLinesDropped: res.OutputLinesDropped}
}
