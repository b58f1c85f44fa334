package driver

import (
	"strconv"
	"time"
)

// Tag names, exactly as the Python provider reads them (docs/handoff.md,
// "The ownership tags"). The portable layer stamps them on a spec's Tags
// before it calls Create; a driver keeps them with the sandbox, and reads
// what it needs of them (the name, the expiry).
const (
	// ReservedTagPrefix starts every tag name this module and the Python
	// provider write; a spec's own tags may not use it.
	ReservedTagPrefix = "airflow_"

	TagSandbox   = "airflow_sandbox"    // the sandbox name
	TagOwner     = "airflow_owner"      // "<dag_id>/<run_id>"
	TagHolder    = "airflow_holder"     // "<dag_id>/<run_id>/<task_id>[<map_index>]" while attached
	TagExpiresAt = "airflow_expires_at" // unix seconds, decimal
	TagNetwork   = "airflow_network"    // the network policy, as Python writes it
	TagWorkdir   = "airflow_workdir"
	// TagHost names the worker host a sandbox that lives on one host (a
	// local sandbox) was created on; its driver stamps it.
	TagHost = "airflow_host"
	// TagCreatedBy marks sandboxes this bundle created. Sweep removes
	// these and, told apart by their name and expiry tag, the Python
	// provider's (which marks none); never anyone else's.
	TagCreatedBy = "airflow_created_by"
	// CreatedByValue is TagCreatedBy's value.
	CreatedByValue = "airflow-go-worker"
)

// ExpiresAt reads the airflow_expires_at tag; zero when absent or malformed.
func ExpiresAt(tags map[string]string) time.Time {
	secs, err := strconv.ParseInt(tags[TagExpiresAt], 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Unix(secs, 0)
}

// CheckUnstamped is for a driver's Create, which the portable layer calls
// only after its own check (defaults, Validate, CheckBackend) passed and
// it stamped the spec's ownership tags with name. A spec without that
// stamp came from a direct caller of the driver (the test emulators back
// a remote backend's API with the local driver, a Go user may call a
// driver's Create): it gets the same refusal here, so no caller is given
// a weaker sandbox than it asked for. A caller that stamps the tags
// itself takes the portable layer's part, this check included.
func CheckUnstamped(drv Driver, name string, spec Spec) error {
	if spec.Tags[TagSandbox] == name {
		return nil
	}
	spec = spec.WithDefaults()
	if err := spec.Validate(); err != nil {
		return err
	}
	return CheckBackend(drv.Backend(), drv.Capabilities(), drv, spec, nil)
}
