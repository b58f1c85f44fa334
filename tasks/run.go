package tasks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	"github.com/airflow-sandbox/airflow-go-worker/redact"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// DefaultOutputTail is how much of a command's output RunResult keeps.
const DefaultOutputTail = 4 << 10

// RunInput names a sandbox and the commands to run in it.
type RunInput struct {
	// BackendOptions locate the sandbox (backend, conn_id and
	// backend_options); a Record given as Sandbox supplies the first two.
	BackendOptions
	// Sandbox is the id provision returned, or its Record.
	Sandbox SandboxRef `json:"sandbox"`
	// Command is one command or a list, each run with sh -c, in order,
	// stopping at the first failure.
	Command Commands          `json:"command"`
	Timeout Duration          `json:"timeout,omitempty"` // per command; default 10m
	Env     map[string]string `json:"env,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
	// AllowFailure makes a non-zero exit (or a timeout) a result rather than
	// a task failure.
	AllowFailure bool `json:"allow_failure,omitempty"`
	// Owner the sandbox must belong to; default the Dag run.
	Owner string `json:"owner,omitempty"`
	// Deferrable runs each command detached and defers the task between
	// polls, every PollInterval (default 30s), so no worker slot waits on
	// it (docs/deferral.md). Timeout then has no default: the sandbox's
	// lifetime bounds a command.
	Deferrable   bool     `json:"deferrable,omitempty"`
	PollInterval Duration `json:"poll_interval,omitempty"`
}

// RunResult is how the last command run ended.
type RunResult struct {
	ExitCode   int    `json:"exit_code"`
	OutputTail string `json:"output_tail"`
	TimedOut   bool   `json:"timed_out"`
	// OutputLinesDropped counts the lines of the task's command output
	// not logged, past the operator's log limit (CommandLogLimitEnv);
	// the output tail still has the last of them.
	OutputLinesDropped int64 `json:"output_lines_dropped,omitempty"`
}

// FollowTasks is what a run task declared as a branch (the bundle config's
// branch:) follows: the task ids on the last line the last command printed,
// separated by spaces or commas, as a Python branch returns them. Nothing
// printed follows none.
func (r RunResult) FollowTasks() []string {
	lines := strings.Split(strings.TrimRight(r.OutputTail, "\n"), "\n")
	last := lines[len(lines)-1]
	return strings.FieldsFunc(last, func(c rune) bool { return c == ',' || unicode.IsSpace(c) })
}

// CommandError is a command that exited non-zero or timed out. It carries
// the result so callers can show the output tail.
type CommandError struct {
	Command string
	Result  RunResult
	// AllowHint adds the advice to set allow_failure (only the run task has it).
	AllowHint bool
}

func (e *CommandError) Error() string {
	what := fmt.Sprintf("exited with code %d", e.Result.ExitCode)
	if e.Result.TimedOut {
		what = "timed out"
	}
	msg := fmt.Sprintf("command %q %s", e.Command, what)
	if e.AllowHint {
		msg += "; set allow_failure: true to accept this"
	}
	if tail := strings.TrimSpace(e.Result.OutputTail); tail != "" {
		msg += "\nlast output:\n" + tail
	}
	return msg
}

// RunCommands runs the commands in an existing sandbox, streaming their
// output to the task log line by line.
func RunCommands(ctx context.Context, d Deps, in RunInput) (RunResult, error) {
	if err := d.check(); err != nil {
		return RunResult{}, err
	}
	if len(in.Command) == 0 {
		return RunResult{}, final.Errorf("command: nothing to run; give a command string or a list of them")
	}
	sb, backend, tags, err := openRef(ctx, d, in.BackendOptions, in.Sandbox, in.Owner)
	if err != nil {
		return RunResult{}, err
	}
	defer backend.Close()
	if h := tags[sandbox.TagHolder]; h != "" {
		d.logger().Warn("an agent task holds this sandbox; commands run alongside its work", "holder", h)
	}
	secrets, err := sandboxSecrets(ctx, d, sb.ID(), tags)
	if err != nil {
		return RunResult{}, err
	}
	limit, err := commandLogLimit()
	if err != nil {
		return RunResult{}, err
	}
	red, budget := newRedactor(secrets), newLogBudget(limit)
	if in.Deferrable {
		job := deferredJob{commands: in.Command, timeout: time.Duration(in.Timeout), env: in.Env, workdir: in.Workdir, red: red, budget: budget}
		return runDeferred(ctx, d, in, sb, backend, job)
	}
	var res RunResult
	for _, cmd := range in.Command {
		res, err = runOne(ctx, d, sb, cmd, execOptions(in.Timeout, in.Env, in.Workdir), red, budget)
		if err != nil {
			return res, err
		}
		if res.ExitCode != 0 || res.TimedOut {
			if !in.AllowFailure {
				return res, &CommandError{Command: cmd, Result: res, AllowHint: true}
			}
			d.logger().Warn("command failed; continuing because allow_failure is set", "command", cmd, "exit_code", res.ExitCode, "timed_out", res.TimedOut)
			break
		}
	}
	return res, nil
}

// runOne runs one command, streaming stdout and stderr to the log and
// keeping the tail of both, interleaved line by line as they arrived.
// Secrets the sandbox holds are redacted from both. What is logged counts
// against the task's budget; past it, lines are counted and dropped.
func runOne(ctx context.Context, d Deps, sb *sandbox.Sandbox, cmd string, opt sandbox.ExecOptions, red *redact.Set, budget *logBudget) (RunResult, error) {
	log := d.logger()
	log.Info("running", "sandbox", sb.ID(), "command", cmd)
	tail := newOutputTail(DefaultOutputTail)
	stdout, stderr := newLineLogger(log, "stdout", red), newLineLogger(log, "stderr", red)
	stdout.tail, stderr.tail = tail, tail
	stdout.budget, stderr.budget = budget, budget
	opt.Stdout, opt.Stderr = stdout, stderr
	before, _ := budget.dropped()
	r, err := sb.Exec(ctx, cmd, opt)
	stdout.Flush()
	stderr.Flush()
	dropped, droppedBytes := budget.dropped()
	if dropped > before {
		log.Warn(fmt.Sprintf("%d line(s) of this command's output not logged (%d in this task so far, %d bytes): past the task's log limit", dropped-before, dropped, droppedBytes),
			"lines_not_logged", dropped-before, "task_lines_not_logged", dropped)
	}
	out := tail.buf.String()
	if tail.buf.Truncated() {
		// The tail holds redacted lines, but its cut may fall inside one (or
		// inside a ***): start at the next whole line.
		if i := strings.IndexByte(out, '\n'); i >= 0 {
			out = out[i+1:]
		}
	}
	// Masked line by line already; once more whole, so nothing the cut or
	// the interleaving of the two streams joined shows a secret.
	out = red.String(out)
	res := RunResult{ExitCode: r.ExitCode, OutputTail: out, TimedOut: r.TimedOut, OutputLinesDropped: dropped}
	if err != nil {
		return res, fmt.Errorf("running %q in %s: %w", cmd, sb, err)
	}
	if r.SandboxLost {
		return res, final.Errorf("the sandbox %s died while %q was running; it cannot be used any more", sb.ID(), cmd)
	}
	if r.TimedOut {
		res.ExitCode = -1
	}
	log.Info("command finished", "exit_code", res.ExitCode, "timed_out", res.TimedOut, "duration", r.Duration)
	return res, nil
}

// openRef opens the sandbox a task was pointed at and checks that it belongs
// to the owner (default: this Dag run), so a task never works in a sandbox
// another run owns.
func openRef(ctx context.Context, d Deps, opts BackendOptions, ref SandboxRef, owner string) (*sandbox.Sandbox, *sandbox.Backend, map[string]string, error) {
	if ref.ID == "" || ref.ID == "None" {
		// In a teardown this is usually a provision task that failed
		// before it returned an id: say so, not only how to bind it.
		return nil, nil, nil, final.Errorf("sandbox: %q is not a sandbox id, so there is no sandbox to work on: either the provision task returned none (it failed or was skipped; see its log), or sandbox is not bound to its XCom (bind it in the bundle config with inputs: {sandbox: {xcom: <provision task_id>}}, which works on every Airflow and under airflow-go-worker run; passing it in the stub call, collect(sandbox=provision()), reaches the task only on Airflow 3.4)", ref.ID)
	}
	if strings.Contains(ref.ID, "{{") {
		return nil, nil, nil, final.Errorf("sandbox: %q is a template that nothing rendered (the Go task receives values as they are); bind it to the provision task's XCom instead: inputs: {sandbox: {xcom: <provision task_id>}} in the bundle config", ref.ID)
	}
	opts, err := mergeRef(opts, ref)
	if err != nil {
		return nil, nil, nil, err
	}
	backend, _, err := openBackend(ctx, d, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	sb := backend.Open(ref.ID)
	if owner == "" {
		owner = d.Run.Owner()
	}
	tags, err := sb.Tags(ctx)
	switch {
	case errors.Is(err, sandbox.ErrUnsupported):
	case errors.Is(err, sandbox.ErrOtherHost):
		backend.Close()
		return nil, nil, nil, err // it says where the sandbox is, and what to do
	case errors.Is(err, sandbox.ErrGone):
		backend.Close()
		return nil, nil, nil, fmt.Errorf("sandbox %s no longer exists (destroyed or expired; provision a new one): %w", ref.ID, err)
	case err != nil:
		backend.Close()
		return nil, nil, nil, fmt.Errorf("reading the tags of sandbox %s: %w", ref.ID, err)
	case tags[sandbox.TagOwner] != owner:
		backend.Close()
		return nil, nil, nil, final.Errorf("sandbox %s belongs to %q, not %q; use the sandbox this Dag run provisioned, or set owner", ref.ID, tags[sandbox.TagOwner], owner)
	}
	return sb, backend, tags, nil
}

// mergeRef takes the backend and connection from a Record, refusing a
// contradiction with what the task was configured with.
func mergeRef(opts BackendOptions, ref SandboxRef) (BackendOptions, error) {
	if ref.Backend != "" {
		if opts.Backend != "" && !strings.EqualFold(opts.Backend, ref.Backend) {
			return opts, final.Errorf("sandbox %s is a %s sandbox but backend is %s; remove backend or point at the right sandbox", ref.ID, ref.Backend, opts.Backend)
		}
		opts.Backend = ref.Backend
	}
	if ref.ConnID != "" && opts.ConnID == "" {
		opts.ConnID = ref.ConnID
	}
	return opts, nil
}

func execOptions(timeout Duration, env map[string]string, workdir string) sandbox.ExecOptions {
	return sandbox.ExecOptions{Timeout: time.Duration(timeout), Env: env, Workdir: workdir}
}
