package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// Sandbox is the portable handle on one sandbox. Create one with Create, or
// reattach to an existing one with Open (no call) or Attach (owner checked).
type Sandbox struct {
	drv driver.Driver
	id  string

	mu   sync.Mutex
	info *Info // nil until known
	now  func() time.Time
}

// create validates spec, applies defaults, refuses what the backend's
// Capabilities do not cover and what its rules refuse (check), stamps the
// ownership tags and provisions the sandbox. A refused or invalid spec
// fails before anything is provisioned.
func create(ctx context.Context, drv driver.Driver, spec Spec, able func(Capability) []string) (*Sandbox, error) {
	spec, err := check(drv, spec, able)
	if err != nil {
		return nil, err
	}
	name := NewName()
	spec.Tags = OwnershipTags(name, spec, time.Now())
	info, err := drv.Create(ctx, name, spec)
	if err != nil {
		return nil, err
	}
	if info.Backend == "" {
		info.Backend = drv.Backend()
	}
	return &Sandbox{drv: drv, id: info.ID, info: &info, now: time.Now}, nil
}

// check is the one refusal of a spec at run time: defaults, Validate, then
// driver.CheckBackend with the driver's capabilities and rules. It returns
// the spec with defaults applied.
func check(drv driver.Driver, spec Spec, able func(Capability) []string) (Spec, error) {
	spec = spec.WithDefaults()
	if err := spec.Validate(); err != nil {
		return spec, err
	}
	return spec, driver.CheckBackend(drv.Backend(), drv.Capabilities(), drv, spec, able)
}

// open returns a handle on an existing sandbox without contacting the
// backend; the first operation finds out whether it still exists.
func open(drv driver.Driver, id string) *Sandbox {
	return &Sandbox{drv: drv, id: id, now: time.Now}
}

// ID is the backend handle: what travels through XCom.
func (s *Sandbox) ID() string { return s.id }

// Info describes the sandbox, asking the backend once if needed.
func (s *Sandbox) Info(ctx context.Context) (Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.info != nil {
		return *s.info, nil
	}
	info, err := s.drv.Info(ctx, s.id)
	if err != nil {
		return Info{}, err
	}
	if info.Backend == "" {
		info.Backend = s.drv.Backend()
	}
	s.info = &info
	return info, nil
}

// resolve makes p absolute against the sandbox's workdir.
func (s *Sandbox) resolve(ctx context.Context, p string) (string, error) {
	if p == "" {
		return "", &Error{Op: "resolve path", Sandbox: s.id, Err: final.Errorf("empty path")}
	}
	if path.IsAbs(p) {
		return path.Clean(p), nil
	}
	info, err := s.Info(ctx)
	if err != nil {
		return "", err
	}
	wd := info.Workdir
	if wd == "" {
		wd = DefaultWorkdir
	}
	return path.Join(wd, p), nil
}

// ExecOptions tune one command.
type ExecOptions struct {
	Timeout time.Duration // 0 = DefaultExecTimeout; shortened to the sandbox's remaining lifetime
	Env     map[string]string
	Workdir string
	Stdin   io.Reader
	Stdout  io.Writer // nil = discarded
	Stderr  io.Writer // nil = discarded
	// MaxOutputBytes caps what reaches Stdout and Stderr, each; the rest is
	// dropped and the result says so. 0 = no cap.
	MaxOutputBytes int64
}

// Exec runs command through sh -c. A non-zero exit is a result, not an error;
// errors mean the command could not be run or its outcome is unknown.
func (s *Sandbox) Exec(ctx context.Context, command string, opt ExecOptions) (ExecResult, error) {
	if errs := driver.EnvProblems(opt.Env); len(errs) > 0 {
		return ExecResult{}, &Error{Op: "exec", Sandbox: s.id, Err: final.Errorf("the command's environment is invalid: %s", strings.Join(errs, "; "))}
	}
	timeout := opt.Timeout
	if timeout <= 0 {
		timeout = DefaultExecTimeout
	}
	// Shorten to the remaining lifetime: the backend will kill the sandbox
	// then anyway, and the caller should learn it was a deadline.
	if info, err := s.Info(ctx); err == nil && !info.ExpiresAt.IsZero() {
		left := info.ExpiresAt.Sub(s.now()).Truncate(time.Second)
		if left < time.Second {
			left = time.Second
		}
		if left < timeout {
			timeout = left
		}
	}
	stdout := newLimitWriter(opt.Stdout, opt.MaxOutputBytes)
	stderr := newLimitWriter(opt.Stderr, opt.MaxOutputBytes)
	wd := opt.Workdir
	if wd != "" {
		var err error
		if wd, err = s.resolve(ctx, wd); err != nil {
			return ExecResult{}, err
		}
	}
	start := s.now()
	res, err := s.drv.Exec(ctx, s.id, ExecRequest{
		Command: command, Timeout: timeout, Env: opt.Env, Workdir: wd,
		Stdin: opt.Stdin, Stdout: stdout, Stderr: stderr,
	})
	if res.AppliedTimeout == 0 {
		res.AppliedTimeout = timeout
	}
	if res.Duration == 0 {
		res.Duration = s.now().Sub(start)
	}
	res.StdoutTruncated = res.StdoutTruncated || stdout.truncated
	res.StderrTruncated = res.StderrTruncated || stderr.truncated
	return res, err
}

// OpenFile opens a file for a streaming read of at most maxBytes (< 0: no
// limit). It refuses directories, non-regular files and files over the limit
// with typed errors, and the reader fails with ErrTooLarge if the file grows
// past the limit while it is read.
func (s *Sandbox) OpenFile(ctx context.Context, p string, maxBytes int64) (io.ReadCloser, int64, error) {
	abs, err := s.resolve(ctx, p)
	if err != nil {
		return nil, 0, err
	}
	rc, size, err := s.drv.OpenFile(ctx, s.id, abs, maxBytes)
	if err != nil {
		return nil, 0, err
	}
	if maxBytes >= 0 {
		rc = driver.LimitReader(rc, rc, abs, maxBytes)
	}
	return rc, size, nil
}

// WriteFile streams r into p (relative paths resolve against the workdir),
// creating parent directories. mode 0 means 0644.
func (s *Sandbox) WriteFile(ctx context.Context, p string, r io.Reader, mode fs.FileMode) error {
	abs, err := s.resolve(ctx, p)
	if err != nil {
		return err
	}
	if mode == 0 {
		mode = 0o644
	}
	return s.drv.WriteFile(ctx, s.id, abs, r, mode)
}

// List lists a directory.
func (s *Sandbox) List(ctx context.Context, p string) ([]FileInfo, error) {
	abs, err := s.resolve(ctx, p)
	if err != nil {
		return nil, err
	}
	return s.drv.List(ctx, s.id, abs)
}

// Stat describes a path.
func (s *Sandbox) Stat(ctx context.Context, p string) (FileInfo, error) {
	abs, err := s.resolve(ctx, p)
	if err != nil {
		return FileInfo{}, err
	}
	return s.drv.Stat(ctx, s.id, abs)
}

// Tags reads the sandbox's tags; ErrUnsupported when the backend keeps none.
func (s *Sandbox) Tags(ctx context.Context) (map[string]string, error) {
	t, err := s.tagger("read tags")
	if err != nil {
		return nil, err
	}
	return t.Tags(ctx, s.id)
}

// SetTags replaces the sandbox's tags; ErrUnsupported when the backend keeps
// none.
func (s *Sandbox) SetTags(ctx context.Context, tags map[string]string) error {
	t, err := s.tagger("set tags")
	if err != nil {
		return err
	}
	return t.SetTags(ctx, s.id, tags)
}

func (s *Sandbox) tagger(op string) (driver.Tagger, error) {
	if t, ok := s.drv.(driver.Tagger); ok {
		return t, nil
	}
	return nil, &Error{Op: op, Sandbox: s.id, Kind: ErrUnsupported, Err: fmt.Errorf("the %s backend keeps no tags, so its sandboxes have no owner and cannot be attached to", s.drv.Backend())}
}

// As sets target to the backend's own client or handle when the driver
// supports target's type (see each driver's documentation).
func (s *Sandbox) As(target any) bool { return s.drv.As(target) }

// Destroy removes the sandbox; destroying one that is already gone succeeds.
func (s *Sandbox) Destroy(ctx context.Context) error {
	err := s.drv.Destroy(ctx, s.id)
	if errors.Is(err, ErrGone) {
		return nil
	}
	return err
}

// limitWriter passes at most max bytes to w (max 0: all) and remembers
// whether it dropped any. A nil w discards.
type limitWriter struct {
	w         io.Writer
	left      int64
	capped    bool
	truncated bool
	mu        sync.Mutex
}

func newLimitWriter(w io.Writer, max int64) *limitWriter {
	if w == nil {
		w = io.Discard
	}
	return &limitWriter{w: w, left: max, capped: max > 0}
}

func (l *limitWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.capped {
		return l.w.Write(p)
	}
	n := len(p)
	if int64(len(p)) > l.left {
		p = p[:l.left]
		l.truncated = true
	}
	l.left -= int64(len(p))
	if len(p) > 0 {
		if _, err := l.w.Write(p); err != nil {
			return 0, err
		}
	}
	return n, nil // report all consumed so the producer keeps draining
}

// String is for logs: backend and id, never credentials.
func (s *Sandbox) String() string { return fmt.Sprintf("%s sandbox %s", s.drv.Backend(), s.id) }
