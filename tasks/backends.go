package tasks

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// Backend names.
const (
	BackendLocal       = "local"
	BackendModal       = "modal"
	BackendOpenSandbox = "opensandbox"
)

// Default connection ids, as the Python provider names them.
const (
	DefaultModalConnID       = "modal_default"
	DefaultOpenSandboxConnID = "opensandbox_default"
)

// BackendOptions choose the backend, its connection and backend-specific
// settings. Task inputs embed it; the bundle runtime binds embedded fields by
// name, as encoding/json does.
type BackendOptions struct {
	// Backend is local, modal or opensandbox; default local.
	Backend string `json:"backend,omitempty"`
	// ConnID is the Airflow connection with the backend's credentials;
	// default modal_default / opensandbox_default. The local backend has none.
	ConnID string `json:"conn_id,omitempty"`

	// Modal only.
	AppName           string   `json:"app_name,omitempty"`
	GPU               string   `json:"gpu,omitempty"`
	Regions           []string `json:"regions,omitempty"`
	Cloud             string   `json:"cloud,omitempty"`
	EgressEnforcement string   `json:"egress_enforcement,omitempty"`

	// Local only: run without pulling the image (the host's root filesystem
	// is used read-only instead).
	IgnoreImage bool `json:"ignore_image,omitempty"`
}

// DriverRequest is a resolved backend choice: the connection has been read
// from Airflow (Conn nil means none: the local backend, or Modal credentials
// from the environment).
type DriverRequest struct {
	Backend string
	ConnID  string // the connection actually used; "" when Conn is nil
	Conn    *connections.Connection
	Options BackendOptions
	Logger  hclog.Logger
}

// DriverOpener builds the driver for a resolved request. DefaultDrivers
// knows local, modal and opensandbox; tests and platform code may supply
// their own.
type DriverOpener func(ctx context.Context, req DriverRequest) (sandbox.Driver, error)

// normalize fills the backend default and sorts out options that do not
// apply to the chosen backend. Settings that only place or name a sandbox
// (conn_id on local, app_name, regions, cloud, ignore_image...) are ignored,
// so one config can be pointed at another backend through dag_run.conf. A
// GPU is a capability the task may rely on: asking for one on a backend
// without GPUs is refused rather than ignored.
func (o BackendOptions) normalize() (BackendOptions, []string, error) {
	o.Backend = strings.ToLower(strings.TrimSpace(o.Backend))
	if o.Backend == "" {
		o.Backend = BackendLocal
	}
	var ignored []string
	ignore := func(name string, set bool) {
		if set {
			ignored = append(ignored, name)
		}
	}
	switch o.Backend {
	case BackendLocal, BackendOpenSandbox:
		if o.GPU != "" {
			return o, nil, fmt.Errorf("gpu: the %s backend has no GPUs; use backend: modal for gpu %q, or remove gpu", o.Backend, o.GPU)
		}
		ignore("app_name", o.AppName != "")
		ignore("regions", len(o.Regions) > 0)
		ignore("cloud", o.Cloud != "")
		ignore("egress_enforcement", o.EgressEnforcement != "")
		o.AppName, o.Regions, o.Cloud, o.EgressEnforcement = "", nil, "", ""
		if o.Backend == BackendLocal {
			ignore("conn_id", o.ConnID != "")
			o.ConnID = ""
		} else {
			ignore("ignore_image", o.IgnoreImage)
			o.IgnoreImage = false
		}
	case BackendModal:
		ignore("ignore_image", o.IgnoreImage)
		o.IgnoreImage = false
	default:
		return o, nil, fmt.Errorf("backend %q is not one of local, modal, opensandbox", o.Backend)
	}
	return o, ignored, nil
}

// resolveDriverRequest reads the backend's connection. A missing
// modal_default falls back to the environment's Modal credentials (as
// Python's ModalHook does); any other missing connection is an error.
func resolveDriverRequest(ctx context.Context, d Deps, opts BackendOptions) (DriverRequest, error) {
	opts, ignored, err := opts.normalize()
	if err != nil {
		return DriverRequest{}, err
	}
	if len(ignored) > 0 {
		d.logger().Info("ignoring settings the backend does not use", "backend", opts.Backend, "settings", strings.Join(ignored, ", "))
	}
	req := DriverRequest{Backend: opts.Backend, Options: opts, Logger: d.logger()}
	if opts.Backend == BackendLocal {
		return req, nil
	}
	id := opts.ConnID
	if id == "" {
		id = DefaultModalConnID
		if opts.Backend == BackendOpenSandbox {
			id = DefaultOpenSandboxConnID
		}
	}
	conn, err := d.Airflow.GetConnection(ctx, id)
	switch {
	case errors.Is(err, connections.ErrNotFound) && opts.Backend == BackendModal && id == DefaultModalConnID:
		d.logger().Info("no modal_default connection; using Modal credentials from the environment (MODAL_TOKEN_ID/MODAL_TOKEN_SECRET or ~/.modal.toml)")
		return req, nil
	case errors.Is(err, connections.ErrNotFound):
		return DriverRequest{}, fmt.Errorf("the %s backend needs Airflow connection %q, which does not exist; create it or set conn_id to an existing one", opts.Backend, id)
	case err != nil:
		return DriverRequest{}, fmt.Errorf("reading Airflow connection %q for the %s backend: %w", id, opts.Backend, err)
	}
	if err := maskSecrets(ctx, d, id, map[string]string{"password": conn.Password}); err != nil {
		return DriverRequest{}, err
	}
	req.ConnID = id
	req.Conn = &conn
	return req, nil
}

// openDriver resolves the connection and builds the driver.
func openDriver(ctx context.Context, d Deps, opts BackendOptions) (sandbox.Driver, DriverRequest, error) {
	req, err := resolveDriverRequest(ctx, d, opts)
	if err != nil {
		return nil, req, err
	}
	drv, err := d.drivers()(ctx, req)
	if err != nil {
		return nil, req, fmt.Errorf("opening the %s backend: %w", req.Backend, err)
	}
	return drv, req, nil
}

// OpenDriver resolves the backend's connection (through d.Airflow) and
// builds its driver, for Go tasks that use package sandbox directly. The
// caller closes the driver.
func OpenDriver(ctx context.Context, d Deps, opts BackendOptions) (sandbox.Driver, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	drv, _, err := openDriver(ctx, d, opts)
	return drv, err
}
