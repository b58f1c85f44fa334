package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// Detached commands (driver/detached.go): the portable implementation runs
// the command from a POSIX shell wrapper, in the background of an Exec
// (or, for a driver.DetachedLauncher, in the foreground of a launch that
// outlives the caller), with its output and exit status in files under
// DetachedRoot/<id>/ inside the sandbox; a poll is one Exec that reads the
// status first and the output after, so output read with a final status
// is complete.

type (
	Offsets        = driver.Offsets
	DetachedStatus = driver.DetachedStatus
)

// DetachedRoot is where the portable detached commands keep their files.
const DetachedRoot = "/tmp/.airflow-go-worker"

// DefaultPollBytes bounds what one poll reads of each stream.
const DefaultPollBytes = 1 << 20

// DetachedOptions are a detached command's environment and workdir, as
// ExecOptions' (its output goes to files; it has no timeout of its own:
// the sandbox's lifetime ends it, or the caller stops it).
type DetachedOptions struct {
	Env     map[string]string
	Workdir string
}

// StartDetached starts command (through sh -c) so that it runs on with no
// caller waiting, and returns its id, which PollDetached takes.
func (s *Sandbox) StartDetached(ctx context.Context, command string, opt DetachedOptions) (string, error) {
	if errs := driver.EnvProblems(opt.Env); len(errs) > 0 {
		return "", &Error{Op: "start detached", Sandbox: s.id, Err: final.Errorf("the command's environment is invalid: %s", strings.Join(errs, "; "))}
	}
	wd := opt.Workdir
	if wd != "" {
		var err error
		if wd, err = s.resolve(ctx, wd); err != nil {
			return "", err
		}
	}
	req := ExecRequest{Command: command, Env: opt.Env, Workdir: wd, Timeout: DefaultExecTimeout}
	if d, ok := s.drv.(driver.Detacher); ok {
		return d.StartDetached(ctx, s.id, req)
	}
	id := RandomHex(8)
	dir := path.Join(DetachedRoot, id)
	if err := s.WriteFile(ctx, path.Join(dir, "cmd"), strings.NewReader(command), 0o600); err != nil {
		return "", fmt.Errorf("starting a detached command: writing it into the sandbox: %w", err)
	}
	launcher, ok := s.drv.(driver.DetachedLauncher)
	if ok {
		req.Command = foregroundWrapper(dir)
		if err := launcher.LaunchDetached(ctx, s.id, req); err != nil {
			return "", fmt.Errorf("starting a detached command: %w", err)
		}
		return id, nil
	}
	req.Command = backgroundWrapper(dir)
	res, err := s.Exec(ctx, req.Command, ExecOptions{Env: opt.Env, Workdir: wd})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("its launcher exited with code %d", res.ExitCode)
	}
	if err != nil {
		return "", fmt.Errorf("starting a detached command: %w", err)
	}
	return id, nil
}

// quote is s as one single-quoted shell word.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// runWrapper runs the command's file with its output in files, then
// records its exit status atomically (exit.tmp, then mv), so a poll sees
// either no status or the whole of it.
func runWrapper(dir string) string {
	// The command runs in a session (so a process group) of its own where
	// setsid -w exists (util-linux; busybox's has no -w and may fork, so
	// it is not used): a stop then reaches whatever the command started.
	// A watcher in the same process tree (a later Exec may not see its
	// pids: the local backend gives each command its own pid namespace)
	// sends the group, or else the command, SIGTERM once StopDetached has
	// left a stop file.
	return "d=" + quote(dir) + `; o="$d/stdout"; e="$d/stderr"
if setsid -w true 2>/dev/null </dev/null; then setsid -w sh "$d/cmd" >"$o" 2>"$e" </dev/null & else sh "$d/cmd" >"$o" 2>"$e" </dev/null & fi
p=$!; echo $p >"$d/pid"
(while [ ! -f "$d/stop" ] && kill -0 $p 2>/dev/null; do sleep 1; done; [ -f "$d/stop" ] && { kill -TERM -$p || kill -TERM $p; }) >/dev/null 2>&1 </dev/null &
wait $p; echo $? >"$d/exit.tmp"; mv "$d/exit.tmp" "$d/exit"`
}

func foregroundWrapper(dir string) string { return runWrapper(dir) }

// backgroundWrapper starts runWrapper in the background, immune to the
// hang-up its launcher's end may send, with none of the launcher's
// descriptors, and returns at once.
func backgroundWrapper(dir string) string {
	return "(trap '' HUP; " + runWrapper(dir) + "\n) >/dev/null 2>&1 </dev/null &"
}

// PollDetached reports a detached command's state and its output from
// the given offsets (at most maxBytes of each stream; 0: DefaultPollBytes).
// ErrGone: the sandbox is gone; ErrNotFound: it has no such command.
func (s *Sandbox) PollDetached(ctx context.Context, id string, from Offsets, maxBytes int64) (DetachedStatus, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultPollBytes
	}
	if d, ok := s.drv.(driver.Detacher); ok {
		return d.PollDetached(ctx, s.id, id, from, maxBytes)
	}
	if !validDetachedID(id) {
		return DetachedStatus{}, &Error{Op: "poll detached", Sandbox: s.id, Kind: ErrNotFound, Err: fmt.Errorf("%q is not a detached command's id", id)}
	}
	var stdout, stderr bytes.Buffer
	res, err := s.Exec(ctx, pollScript(path.Join(DetachedRoot, id), from, maxBytes), ExecOptions{Stdout: &stdout, Stderr: &stderr, MaxOutputBytes: maxBytes + 64})
	if err != nil {
		return DetachedStatus{}, err
	}
	if res.SandboxLost {
		return DetachedStatus{}, &Error{Op: "poll detached", Sandbox: s.id, Kind: ErrGone, Err: fmt.Errorf("the sandbox died while its command %s was polled", id)}
	}
	return parsePoll(s.id, id, stdout.Bytes(), stderr.Bytes(), from)
}

// validDetachedID keeps an id from a resume state (which a Dag author
// could edit) from naming another path in the shell scripts.
func validDetachedID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// pollScript prints the status line (gone, running, or exit N) and then
// the stdout from its offset on stdout, the stderr from its offset on
// stderr.
func pollScript(dir string, from Offsets, maxBytes int64) string {
	return fmt.Sprintf(`d=%s; [ -f "$d/cmd" ] || { echo gone; exit 0; }
if [ -f "$d/exit" ]; then printf 'exit %%s\n' "$(cat "$d/exit")"; else echo running; fi
tail -c +%d "$d/stdout" 2>/dev/null | head -c %d
tail -c +%d "$d/stderr" 2>/dev/null | head -c %d >&2`, quote(dir), from.Stdout+1, maxBytes, from.Stderr+1, maxBytes)
}

func parsePoll(sandboxID, id string, stdout, stderr []byte, from Offsets) (DetachedStatus, error) {
	line, rest, _ := bytes.Cut(stdout, []byte("\n"))
	st := DetachedStatus{Stdout: rest, Stderr: stderr, Next: Offsets{Stdout: from.Stdout + int64(len(rest)), Stderr: from.Stderr + int64(len(stderr))}}
	status := strings.TrimSpace(string(line))
	switch {
	case status == "running":
		st.Running = true
	case strings.HasPrefix(status, "exit "):
		code, err := strconv.Atoi(strings.TrimPrefix(status, "exit "))
		if err != nil {
			return st, &Error{Op: "poll detached", Sandbox: sandboxID, Err: fmt.Errorf("the command %s recorded the exit status %q", id, status)}
		}
		st.ExitCode = code
	case status == "gone":
		return st, &Error{Op: "poll detached", Sandbox: sandboxID, Kind: ErrNotFound, Err: fmt.Errorf("the sandbox has no detached command %s (its files under %s are gone)", id, DetachedRoot)}
	default:
		return st, &Error{Op: "poll detached", Sandbox: sandboxID, Err: fmt.Errorf("polling the command %s printed %q, not its status", id, status)}
	}
	return st, nil
}

// StopDetached has the command, and the processes it started, sent
// SIGTERM within a second (a no-op once it has ended).
func (s *Sandbox) StopDetached(ctx context.Context, id string) error {
	if d, ok := s.drv.(driver.Detacher); ok {
		return d.StopDetached(ctx, s.id, id)
	}
	if !validDetachedID(id) {
		return &Error{Op: "stop detached", Sandbox: s.id, Kind: ErrNotFound, Err: fmt.Errorf("%q is not a detached command's id", id)}
	}
	dir := quote(path.Join(DetachedRoot, id))
	_, err := s.Exec(ctx, `touch `+dir+`/stop`, ExecOptions{})
	return err
}

// DeferralRefusal says why a deferred task cannot use this backend's
// sandboxes (nil: it can): a resume may run on any worker.
func (b *Backend) DeferralRefusal() error {
	if h, ok := b.drv.(driver.HostBound); ok {
		if err := h.DeferralRefusal(); err != nil {
			return &Error{Op: "defer", Kind: ErrRefused, Err: err}
		}
	}
	return nil
}
