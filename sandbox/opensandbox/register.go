package opensandbox

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/registry"
)

// OpenSandbox reads the opensandbox_default connection, which must exist.
func init() {
	registry.Register(registry.Registration{Name: Backend, DefaultConnID: DefaultConnID, Configure: configure})
}

// BundleOptions are the OpenSandbox backend's settings in a bundle config
// (backends: {opensandbox: {...}} or a task's backend_options.opensandbox);
// each is the Options field of the same name.
type BundleOptions struct {
	RequireIPEgressEnforcement bool              `json:"require_ip_egress_enforcement,omitempty"`
	ReadyTimeout               registry.Duration `json:"ready_timeout,omitempty"`
	Image                      string            `json:"image,omitempty"`
	Entrypoint                 []string          `json:"entrypoint,omitempty"`
	DefaultCPU                 string            `json:"default_cpu,omitempty"`
	DefaultMemory              string            `json:"default_memory,omitempty"`
}

func configure(raw json.RawMessage) (registry.Config, error) {
	var o BundleOptions
	if err := registry.DecodeOptions(raw, &o); err != nil {
		return nil, err
	}
	return o, nil
}

// Capabilities of the OpenSandbox backend (the same with any options).
func (o BundleOptions) Capabilities() driver.Capabilities { return capabilities }

// Open builds the driver from the connection.
func (o BundleOptions) Open(_ context.Context, conn *connections.Connection, log hclog.Logger) (driver.Driver, error) {
	if conn == nil {
		return nil, driver.Rejected(errors.New("the opensandbox backend needs a connection"))
	}
	cfg, err := ConfigFromConnection(*conn)
	if err != nil {
		return nil, driver.Rejected(err)
	}
	return New(Options{
		Config: cfg, ReadyTimeout: time.Duration(o.ReadyTimeout), Entrypoint: o.Entrypoint, Image: o.Image,
		DefaultCPU: o.DefaultCPU, DefaultMemory: o.DefaultMemory, RequireIPEgressEnforcement: o.RequireIPEgressEnforcement, Logger: log,
	})
}
