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

// CheckBackendOptions parses every backend's entry of opts.Options with the
// backends r links, and the chosen backend itself, so that a bundle config
// with a misspelt option or a backend this bundle does not link fails when
// it loads. It returns the chosen backend's configuration.
func CheckBackendOptions(r *registry.Registry, opts BackendOptions) (registry.Config, error) {
	for _, name := range slices.Sorted(maps.Keys(opts.Options)) {
		if _, ok := r.Lookup(name); !ok {
			return nil, fmt.Errorf("backend_options.%s: %w", name, r.Unknown(name))
		}
		if _, _, err := r.Configure(name, opts.Options[name]); err != nil {
			return nil, err
		}
	}
	_, cfg, err := r.Configure(opts.name(), opts.Options[opts.name()])
	return cfg, err
}

// resolveBackendRequest parses the backend's options and reads its
// connection. A missing default connection of a backend whose connection is
// optional (Modal) means the backend's environment credentials; any other
// missing connection is an error.
func resolveBackendRequest(ctx context.Context, d Deps, opts BackendOptions) (BackendRequest, error) {
	r := d.backends()
	b, cfg, err := r.Configure(opts.name(), opts.Options[opts.name()])
	if err != nil {
		return BackendRequest{}, err
	}
	req := BackendRequest{Backend: b.Name, Options: opts.Options[b.Name], Config: cfg, Logger: d.logger()}
	if b.DefaultConnID == "" {
		if opts.ConnID != "" {
			d.logger().Info("ignoring conn_id: the backend takes no connection", "backend", b.Name, "conn_id", opts.ConnID)
		}
		return req, nil
	}
	id := opts.ConnID
	if id == "" {
		id = b.DefaultConnID
	}
	conn, err := d.Airflow.GetConnection(ctx, id)
	switch {
	case errors.Is(err, connections.ErrNotFound) && b.ConnOptional && id == b.DefaultConnID:
		d.logger().Info("no "+id+" connection; the backend uses credentials from the worker's environment", "backend", b.Name)
		return req, nil
	case errors.Is(err, connections.ErrNotFound):
		return BackendRequest{}, final.Errorf("the %s backend needs Airflow connection %q, which does not exist; create it or set conn_id to an existing one", b.Name, id)
	case err != nil:
		return BackendRequest{}, fmt.Errorf("reading Airflow connection %q for the %s backend: %w", id, b.Name, err)
	}
	if err := maskSecrets(ctx, d, id, map[string]string{"password": conn.Password}); err != nil {
		return BackendRequest{}, err
	}
	req.ConnID = id
	req.Conn = &conn
	return req, nil
}

// openBackend resolves the request and opens the backend.
func openBackend(ctx context.Context, d Deps, opts BackendOptions) (*sandbox.Backend, BackendRequest, error) {
	req, err := resolveBackendRequest(ctx, d, opts)
	if err != nil {
		return nil, req, err
	}
	drv, err := req.Config.Open(ctx, req.Conn, req.Logger)
	if err != nil {
		return nil, req, fmt.Errorf("opening the %s backend: %w", req.Backend, err)
	}
	return sandbox.NewBackend(drv), req, nil
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
