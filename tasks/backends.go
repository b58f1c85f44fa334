package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/registry"
)

// DefaultBackend is the backend a task uses when its config names none.
const DefaultBackend = "local"

// BackendOptions choose the backend, its connection and its options. Task
// inputs embed it; the bundle runtime binds embedded fields by name, as
// encoding/json does. Which backends exist, which connection each reads and
// what options it takes is up to the backend packages the bundle links
// (sandbox/registry): this package knows none of them.
type BackendOptions struct {
	// Backend is a registered backend's name; default local.
	Backend string `json:"backend,omitempty"`
	// ConnID is the Airflow connection with the backend's credentials;
	// default: the backend's own (modal_default, opensandbox_default).
	// Backends without a connection ignore it.
	ConnID string `json:"conn_id,omitempty"`
	// Options holds each backend's options by backend name, e.g.
	// {"modal": {"app_name": "etl"}, "local": {"ignore_image": true}}; only
	// the chosen backend's entry applies, so one config can be pointed at
	// another backend. A bundle config's top-level backends: section fills
	// it for every task.
	Options map[string]json.RawMessage `json:"backend_options,omitempty"`
}

// BackendRequest is a resolved backend choice: the backend's options are
// parsed and its connection has been read from Airflow (Conn nil means
// none: a backend without connections, or an optional one that is missing).
type BackendRequest struct {
	Backend string
	ConnID  string // the connection actually used; "" when Conn is nil
	Conn    *connections.Connection
	Options json.RawMessage // the chosen backend's entry of BackendOptions.Options
	Config  registry.Config
	Logger  hclog.Logger
}

// name is the chosen backend's name, lower case, default local.
func (o BackendOptions) name() string {
	if n := strings.ToLower(strings.TrimSpace(o.Backend)); n != "" {
		return n
	}
	return DefaultBackend
}

// resolvedBackend is a task's BackendOptions resolved once: the chosen
// backend's registration and its parsed options, which both the check of a
// spec (Check, when a bundle config loads) and the opening of the backend
// (open, when the task runs) use, so a task parses its options once.
type resolvedBackend struct {
	reg    registry.Registration
	config registry.Config
	opts   BackendOptions
	// able names the linked backends that have a capability, for
	// refusals (registry.Able).
	able func(driver.Capability) []string
}

// resolveBackend parses the chosen backend's options with the backends r
// links. It does no I/O.
func resolveBackend(r *registry.Registry, opts BackendOptions) (resolvedBackend, error) {
	reg, cfg, err := r.Configure(opts.name(), opts.Options[opts.name()])
	if err != nil {
		return resolvedBackend{}, err
	}
	return resolvedBackend{reg: reg, config: cfg, opts: opts, able: r.Able}, nil
}

// Check refuses what the backend so configured refuses in spec (defaults
// applied): what its capabilities lack and its own I/O-free rules, in the
// words the portable layer's Create uses at run time (driver.CheckBackend).
func (b resolvedBackend) Check(spec sandbox.Spec) error {
	return driver.CheckBackend(b.reg.Name, b.config.Capabilities(), registry.Rules(b.config), spec, b.able)
}

// CheckBackendOptions parses every backend's entry of opts.Options with the
// backends r links, and the chosen backend itself, so that a bundle config
// with a misspelt option or a backend this bundle does not link fails when
// it loads. It returns the chosen backend's configuration.
func CheckBackendOptions(r *registry.Registry, opts BackendOptions) (registry.Config, error) {
	b, err := checkBackendOptions(r, opts)
	return b.config, err
}

// checkBackendOptions is CheckBackendOptions, returning the chosen backend
// resolved (its options parsed once, with the others').
func checkBackendOptions(r *registry.Registry, opts BackendOptions) (resolvedBackend, error) {
	for _, name := range slices.Sorted(maps.Keys(opts.Options)) {
		if _, ok := r.Lookup(name); !ok {
			return resolvedBackend{}, fmt.Errorf("backend_options.%s: %w", name, r.Unknown(name))
		}
		if name == opts.name() {
			continue // resolved below
		}
		if _, _, err := r.Configure(name, opts.Options[name]); err != nil {
			return resolvedBackend{}, err
		}
	}
	return resolveBackend(r, opts)
}

// request reads the backend's connection. A missing default connection of
// a backend whose connection is optional (Modal) means the backend's
// environment credentials; any other missing connection is an error.
func (b resolvedBackend) request(ctx context.Context, d Deps) (BackendRequest, error) {
	reg, opts := b.reg, b.opts
	req := BackendRequest{Backend: reg.Name, Options: opts.Options[reg.Name], Config: b.config, Logger: d.logger()}
	if reg.DefaultConnID == "" {
		if opts.ConnID != "" {
			d.logger().Info("ignoring conn_id: the backend takes no connection", "backend", reg.Name, "conn_id", opts.ConnID)
		}
		return req, nil
	}
	id := opts.ConnID
	if id == "" {
		id = reg.DefaultConnID
	}
	conn, err := d.Airflow.GetConnection(ctx, id)
	switch {
	case errors.Is(err, connections.ErrNotFound) && reg.ConnOptional && id == reg.DefaultConnID:
		d.logger().Info("no "+id+" connection; the backend uses credentials from the worker's environment", "backend", reg.Name)
		return req, nil
	case errors.Is(err, connections.ErrNotFound):
		return BackendRequest{}, final.Errorf("the %s backend needs Airflow connection %q, which does not exist; create it or set conn_id to an existing one", reg.Name, id)
	case err != nil:
		return BackendRequest{}, fmt.Errorf("reading Airflow connection %q for the %s backend: %w", id, reg.Name, err)
	}
	if err := maskSecrets(ctx, d, id, map[string]string{"password": conn.Password}); err != nil {
		return BackendRequest{}, err
	}
	req.ConnID = id
	req.Conn = &conn
	return req, nil
}

// open reads the backend's connection and opens it. Its Create refuses a
// spec naming the linked backends that could give what this one cannot.
func (b resolvedBackend) open(ctx context.Context, d Deps) (*sandbox.Backend, BackendRequest, error) {
	req, err := b.request(ctx, d)
	if err != nil {
		return nil, req, err
	}
	drv, err := req.Config.Open(ctx, req.Conn, req.Logger)
	if err != nil {
		return nil, req, fmt.Errorf("opening the %s backend: %w", req.Backend, err)
	}
	return sandbox.NewBackend(drv, sandbox.SuggestBackends(b.able)), req, nil
}

// resolveBackendRequest resolves the backend's options and reads its
// connection.
func resolveBackendRequest(ctx context.Context, d Deps, opts BackendOptions) (BackendRequest, error) {
	b, err := resolveBackend(d.backends(), opts)
	if err != nil {
		return BackendRequest{}, err
	}
	return b.request(ctx, d)
}

// openBackend resolves the backend's options and opens it.
func openBackend(ctx context.Context, d Deps, opts BackendOptions) (*sandbox.Backend, BackendRequest, error) {
	b, err := resolveBackend(d.backends(), opts)
	if err != nil {
		return nil, BackendRequest{}, err
	}
	return b.open(ctx, d)
}

// OpenBackend resolves the backend's options and connection (through
// d.Airflow, registering its secret with the masker) and opens it, for Go
// tasks that use package sandbox directly. The caller closes it.
func OpenBackend(ctx context.Context, d Deps, opts BackendOptions) (*sandbox.Backend, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	b, _, err := openBackend(ctx, d, opts)
	return b, err
}

// Check parses the options with the backends r links: the bundle config
// loader calls it with a task's defaults so that a backend this bundle does
// not link, or a misspelt option, fails when the bundle is packed.
func (o BackendOptions) Check(r *registry.Registry) error {
	_, err := CheckBackendOptions(r, o)
	return err
}
