package modal

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/registry"
)

// Modal reads the modal_default connection; when it does not exist the SDK
// finds credentials itself (MODAL_TOKEN_ID/MODAL_TOKEN_SECRET or
// ~/.modal.toml), as the Python provider's ModalHook does.
func init() {
	registry.Register(registry.Registration{Name: "modal", DefaultConnID: DefaultConnID, ConnOptional: true, Configure: configure})
}

// BundleOptions are the Modal backend's settings in a bundle config
// (backends: {modal: {...}} or a task's backend_options.modal); each is the
// Options field of the same name.
type BundleOptions struct {
	AppName           string            `json:"app_name,omitempty"`
	DisableCreateApp  bool              `json:"disable_create_app,omitempty"`
	EgressEnforcement string            `json:"egress_enforcement,omitempty"`
	Regions           []string          `json:"regions,omitempty"`
	Cloud             string            `json:"cloud,omitempty"`
	Retries           int               `json:"retries,omitempty"`
	RetryDelay        registry.Duration `json:"retry_delay,omitempty"`
}

func configure(raw json.RawMessage) (registry.Config, error) {
	var o BundleOptions
	if err := registry.DecodeOptions(raw, &o); err != nil {
		return nil, err
	}
	switch o.EgressEnforcement {
	case "", EgressStrict, EgressSNI:
	default:
		return nil, fmt.Errorf("egress_enforcement: %q is not %q or %q", o.EgressEnforcement, EgressStrict, EgressSNI)
	}
	if o.Retries < 0 {
		return nil, fmt.Errorf("retries: %d is negative", o.Retries)
	}
	return o, nil
}

// Capabilities of the Modal backend with these options.
func (o BundleOptions) Capabilities() driver.Capabilities { return capabilities(o.EgressEnforcement) }

// Open builds the driver from the connection's credentials (nil: the SDK's
// own resolution).
func (o BundleOptions) Open(ctx context.Context, conn *connections.Connection, log hclog.Logger) (driver.Driver, error) {
	creds, err := CredentialsFromConnection(conn)
	if err != nil {
		return nil, driver.Rejected(err)
	}
	return New(ctx, Options{
		Credentials: creds, AppName: o.AppName, DisableCreateApp: o.DisableCreateApp, EgressEnforcement: o.EgressEnforcement,
		Regions: o.Regions, Cloud: o.Cloud, Retries: o.Retries, RetryDelay: time.Duration(o.RetryDelay), Logger: log,
	})
}
