package driver

import (
	"context"
	"io"
	"io/fs"
	"time"
)

// Driver is what a backend implements. The portable sandbox package
// validates input, refuses what the spec asks beyond Capabilities and
// SpecProblems (CheckBackend), applies ownership tags and byte limits, and
// calls a Driver; drivers only translate to their backend, and refuse what
// only they can find out. All methods must be safe for concurrent use.
//
// Features not every backend has are the small optional interfaces below
// (Tagger, Lister, Renewer), which a driver implements exactly when its
// Capabilities say so; As reaches the backend's own client.
type Driver interface {
	// Backend is the backend's name: "local", "modal", "opensandbox".
	Backend() string

	// Capabilities says what a spec may ask of this backend. The portable
	// layer refuses anything else before calling Create.
	Capabilities() Capabilities

	// SpecChecker: SpecProblems lists the backend's own I/O-free rules on
	// a spec (nil: none), the same function its registry.Config offers the
	// bundle config loader. The portable layer refuses what it lists
	// before calling Create. A method of every driver, not an optional
	// interface, so a wrapper that embeds a Driver keeps the rules.
	SpecChecker

	// Create provisions a sandbox named name from spec (already validated,
	// defaults applied, refused by CheckBackend if the backend cannot give
	// it, ownership tags merged into spec.Tags). It refuses (ErrRefused)
	// what only it can find out it cannot enforce (the host's limits, an
	// image directory) before provisioning anything, and never leaves a
	// half-created sandbox behind when it fails.
	Create(ctx context.Context, name string, spec Spec) (Info, error)

	// Info describes an existing sandbox; ErrGone when it no longer exists.
	Info(ctx context.Context, id string) (Info, error)

	// Exec runs req.Command through `sh -c` and streams its output to
	// req.Stdout and req.Stderr (never nil). A command that runs past
	// req.Timeout is killed with its process tree and reported TimedOut; the
	// sandbox and its files survive. A non-zero exit is not an error.
	Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error)

	// OpenFile opens a regular file for streaming reads. It fails with
	// ErrNotFound, ErrIsDir, ErrNotRegular, or a *TooLargeError when the file
	// is larger than maxBytes (maxBytes < 0: no limit). The returned reader
	// must stop with an ErrTooLarge error, not hang, if the file grows past
	// maxBytes while it is read. size is the size at open time.
	OpenFile(ctx context.Context, id, path string, maxBytes int64) (rc io.ReadCloser, size int64, err error)

	// WriteFile streams r into path, creating parent directories, with mode.
	// An existing file (or symlink) at path is replaced.
	WriteFile(ctx context.Context, id, path string, r io.Reader, mode fs.FileMode) error

	// List lists a directory's entries (not recursive), sorted by name.
	List(ctx context.Context, id, path string) ([]FileInfo, error)

	// Stat describes path without following a final symlink.
	Stat(ctx context.Context, id, path string) (FileInfo, error)

	// Destroy removes the sandbox. Destroying a sandbox that is already gone
	// succeeds.
	Destroy(ctx context.Context, id string) error

	// As sets *target to the backend's own client when target's type
	// matches one the driver documents (for example **modal.Client), and
	// reports whether it did: the escape hatch for what the portable API
	// does not cover.
	As(target any) bool

	// Close releases the driver's clients and connections.
	Close() error
}

// Tagger is a driver whose sandboxes carry a tag set (Capabilities.Tags):
// ownership, attach and hand-off to Python agents need it.
type Tagger interface {
	// Tags and SetTags read and replace the sandbox's whole tag set.
	Tags(ctx context.Context, id string) (map[string]string, error)
	SetTags(ctx context.Context, id string, tags map[string]string) error
}

// Lister is a driver that can find sandboxes by tag (Capabilities.List);
// sweep needs it.
type Lister interface {
	// ListSandboxes lists sandboxes whose tags include every pair in match
	// (nil: all the driver can see).
	ListSandboxes(ctx context.Context, match map[string]string) ([]Info, error)
}

// Renewer is a driver that can extend a sandbox's server-side lifetime
// (Capabilities.Renew).
type Renewer interface {
	// Renew moves the expiry to now+extend and returns it.
	Renew(ctx context.Context, id string, extend time.Duration) (time.Time, error)
}

// Info describes a sandbox.
type Info struct {
	ID        string            `json:"id"`   // the backend's handle (Modal: sb-..., local: the name)
	Name      string            `json:"name"` // airflow-sandbox-<12 hex>
	Backend   string            `json:"backend"`
	Workdir   string            `json:"workdir,omitempty"`
	CreatedAt time.Time         `json:"created_at,omitzero"`
	ExpiresAt time.Time         `json:"expires_at,omitzero"`
	Tags      map[string]string `json:"tags,omitempty"`
}

// DefaultExecTimeout bounds a command whose caller gave no timeout: the
// portable layer's when ExecOptions.Timeout is zero, a driver's when a
// direct caller's ExecRequest has none.
const DefaultExecTimeout = 10 * time.Minute

// ExecRequest is one command to run.
type ExecRequest struct {
	Command string            // run through sh -c
	Timeout time.Duration     // > 0; the Sandbox type always sets it
	Env     map[string]string // added to the sandbox's env for this command
	Workdir string            // "" = the sandbox's workdir
	Stdin   io.Reader         // nil = empty
	Stdout  io.Writer
	Stderr  io.Writer
}

// ExecResult is how a command ended. ExitCode is meaningless when TimedOut.
type ExecResult struct {
	ExitCode        int           `json:"exit_code"`
	TimedOut        bool          `json:"timed_out"`
	AppliedTimeout  time.Duration `json:"applied_timeout"`
	StdoutTruncated bool          `json:"stdout_truncated"`
	StderrTruncated bool          `json:"stderr_truncated"`
	// SandboxLost: the sandbox died or was destroyed during the command.
	SandboxLost bool          `json:"sandbox_lost"`
	Duration    time.Duration `json:"duration"`
}

// FileInfo describes one file in a sandbox.
type FileInfo struct {
	Name    string      `json:"name"`
	Path    string      `json:"path"`
	Size    int64       `json:"size"`
	Mode    fs.FileMode `json:"mode"` // type bits tell directory, symlink, device...
	ModTime time.Time   `json:"mod_time,omitzero"`
}

// IsDir reports whether the entry is a directory.
func (f FileInfo) IsDir() bool { return f.Mode.IsDir() }

// IsRegular reports whether the entry is a regular file.
func (f FileInfo) IsRegular() bool { return f.Mode.IsRegular() }
