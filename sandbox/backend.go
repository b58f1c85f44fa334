package sandbox

import (
	"context"
	"fmt"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// Backend is one open connection to a sandbox backend: what a task or a Go
// user holds to create, find and attach to sandboxes. Open one through
// sandbox/registry (which reads the backend's Airflow connection) or wrap a
// driver a backend package built with NewBackend.
type Backend struct {
	drv driver.Driver
	// able names the other backends that offer a capability this one
	// lacks, for Create's refusal (nil: none named).
	able func(Capability) []string
}

// BackendOption tunes a Backend made by NewBackend.
type BackendOption func(*Backend)

// SuggestBackends has Create's refusal name, for each capability the spec
// asks and this backend lacks, the backends able lists as having it
// (sandbox/registry's Able): "gpu: the local backend cannot provide GPUs,
// which modal can".
func SuggestBackends(able func(Capability) []string) BackendOption {
	return func(b *Backend) { b.able = able }
}

// NewBackend wraps a driver in the portable type.
func NewBackend(drv driver.Driver, opts ...BackendOption) *Backend {
	b := &Backend{drv: drv}
	for _, o := range opts {
		o(b)
	}
	return b
}

// Name is the backend's name ("local", "modal", ...).
func (b *Backend) Name() string { return b.drv.Backend() }

// Capabilities says what a spec may ask of this backend.
func (b *Backend) Capabilities() Capabilities { return b.drv.Capabilities() }

// Create validates spec, applies defaults, refuses what the backend's
// Capabilities do not cover and what its own rules (SpecProblems) refuse,
// stamps the ownership tags and provisions the sandbox. A refused or
// invalid spec fails before anything is provisioned. This is where a spec
// is refused at run time; drivers refuse only what they alone can find out.
func (b *Backend) Create(ctx context.Context, spec Spec) (*Sandbox, error) {
	return create(ctx, b.drv, spec, b.able)
}

// Open returns a handle on an existing sandbox without contacting the
// backend.
func (b *Backend) Open(id string) *Sandbox { return open(b.drv, id) }

// Attach claims a sandbox another task created, following the Python
// provider's rules (see attach).
func (b *Backend) Attach(ctx context.Context, id, owner, holder string) (*Sandbox, Attachment, error) {
	return attach(ctx, b.drv, id, owner, holder)
}

// Release drops holder's claim on the sandbox, if it is still holder's.
func (b *Backend) Release(ctx context.Context, id, holder string) error {
	return release(ctx, b.drv, id, holder)
}

// List lists the sandboxes whose tags include every pair in match.
func (b *Backend) List(ctx context.Context, match map[string]string) ([]Info, error) {
	return list(ctx, b.drv, match)
}

// As sets target to the backend's own client when the driver supports
// target's type (see each driver's documentation).
func (b *Backend) As(target any) bool { return b.drv.As(target) }

// Close releases the backend's clients; sandboxes are untouched.
func (b *Backend) Close() error { return b.drv.Close() }

// list lists drv's sandboxes whose tags include every pair in match;
// ErrUnsupported when the backend cannot list.
func list(ctx context.Context, drv driver.Driver, match map[string]string) ([]Info, error) {
	l, ok := drv.(driver.Lister)
	if !ok {
		return nil, &Error{Op: "list sandboxes", Kind: ErrUnsupported, Err: fmt.Errorf("the %s backend cannot list its sandboxes", drv.Backend())}
	}
	return l.ListSandboxes(ctx, match)
}
