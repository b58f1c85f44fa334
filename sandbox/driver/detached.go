package driver

import "context"

// A detached command runs on in its sandbox with no caller waiting: a
// deferred task starts one, exits, and a later process (on any worker)
// polls it. The portable layer implements it once for every backend, from
// Exec and files inside the sandbox; the interfaces below let a backend do
// better.

// Detacher is a backend with detached commands of its own (OpenSandbox's
// execd background commands): the portable layer uses it instead of its
// shell wrapper.
type Detacher interface {
	// StartDetached starts req.Command (through sh -c, with req.Env and
	// req.Workdir; Stdin, Stdout, Stderr and Timeout unused) and returns
	// the command's id.
	StartDetached(ctx context.Context, id string, req ExecRequest) (string, error)
	// PollDetached reports the command's state and its output from the
	// given offsets, at most maxBytes of each stream. A backend that keeps
	// both streams as one reports it as Stdout. ErrGone: the sandbox is
	// gone; ErrNotFound: it has no such command.
	PollDetached(ctx context.Context, id, command string, from Offsets, maxBytes int64) (DetachedStatus, error)
	// StopDetached sends the command and the processes it started
	// SIGTERM (a no-op once it has ended).
	StopDetached(ctx context.Context, id, command string) error
}

// DetachedLauncher is a backend whose commands end with the Exec that
// started them (local: each command its own pid namespace, tied to the
// calling process): LaunchDetached runs req so that it outlives the
// calling process, returning once it has started. The portable wrapper
// then runs the command in the foreground of that launch.
type DetachedLauncher interface {
	LaunchDetached(ctx context.Context, id string, req ExecRequest) error
}

// Offsets are positions in a detached command's stdout and stderr.
type Offsets struct {
	Stdout int64 `json:"stdout"`
	Stderr int64 `json:"stderr"`
}

// DetachedStatus is one poll of a detached command.
type DetachedStatus struct {
	// Running is true until the command has ended; ExitCode is its exit
	// status then.
	Running  bool
	ExitCode int
	// Stdout and Stderr are the output from the polled offsets; Next is
	// where the next poll starts to read all that followed.
	Stdout, Stderr []byte
	Next           Offsets
}

// HostBound is a backend whose sandboxes only the host that created them
// reaches (local): DeferralRefusal says why a deferred task, which may
// resume on another worker, cannot use one (nil: the operator says
// resumes land on the same host).
type HostBound interface {
	DeferralRefusal() error
}
