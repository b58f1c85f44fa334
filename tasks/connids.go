package tasks

import (
	"maps"
	"slices"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/registry"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// Each task kind's input names the Airflow connections the task will read
// (ConnectionIDs). The runtime reads them before it shows the input as the
// task's rendered fields and names its mapped instance, so what they hold
// (a password, an extra's token) is masked there too, not only once the
// task has read them itself. A connection named twice, or one that does
// not exist, costs nothing: the runtime skips it.

// ConnectionIDs is the backend's connection: conn_id, or the backend's own
// default (modal_default).
func (o BackendOptions) ConnectionIDs() []string { return backendConns(o.Backend, o.ConnID) }

// ConnectionIDs: the backend's, the storage connection, those stage_in's
// URLs name, and those env_from reads.
func (in ProvisionInput) ConnectionIDs() []string {
	ids := append(in.BackendOptions.ConnectionIDs(), in.StorageConnID)
	ids = append(ids, urlConns(storage.Default.Parse, slices.Collect(maps.Values(in.StageIn))...)...)
	for _, name := range slices.Sorted(maps.Keys(in.EnvFrom)) {
		ids = append(ids, in.EnvFrom[name].Connection)
	}
	return ids
}

// ConnectionIDs: the provision's, and the export's.
func (in ConvertInput) ConnectionIDs() []string {
	return append(in.ProvisionInput.ConnectionIDs(), exportConns(in.ExportConnID, in.Exports)...)
}

// ConnectionIDs: the sandbox's backend's.
func (in RunInput) ConnectionIDs() []string { return sandboxConns(in.BackendOptions, in.Sandbox) }

// ConnectionIDs: the sandbox's backend's.
func (in DestroyInput) ConnectionIDs() []string { return sandboxConns(in.BackendOptions, in.Sandbox) }

// ConnectionIDs: the sandbox's backend's, and the export's.
func (in ExportInput) ConnectionIDs() []string {
	return append(sandboxConns(in.BackendOptions, in.Sandbox), exportConns(in.ExportConnID, in.Exports)...)
}

// ConnectionIDs: the sandbox's backend's, and the export's.
func (in CollectInput) ConnectionIDs() []string {
	return append(sandboxConns(in.BackendOptions, in.Sandbox), exportConns(in.ExportConnID, in.Exports)...)
}

// ConnectionIDs: the storage connection, and the one the prefix names.
func (in ListInput) ConnectionIDs() []string {
	return append([]string{in.StorageConnID}, urlConns(storage.Default.ParsePrefix, in.Prefix)...)
}

// ConnectionIDs: the backend's, the storage connection, and those the
// storage prefixes name.
func (in SweepInput) ConnectionIDs() []string {
	ids := append(in.BackendOptions.ConnectionIDs(), in.StorageConnID)
	return append(ids, urlConns(storage.Default.ParsePrefix, in.Storage...)...)
}

// backendConns is the connection a backend is opened with.
func backendConns(backend, connID string) []string {
	if connID != "" {
		return []string{connID}
	}
	if reg, ok := registry.Default.Lookup(BackendOptions{Backend: backend}.name()); ok && reg.DefaultConnID != "" {
		return []string{reg.DefaultConnID}
	}
	return nil
}

// sandboxConns is the connection of a sandbox's backend, which a
// provision record may name instead of the options.
func sandboxConns(o BackendOptions, ref SandboxRef) []string {
	ids := o.ConnectionIDs()
	if ref.Backend != "" || ref.ConnID != "" {
		ids = append(ids, backendConns(ref.Backend, ref.ConnID)...)
	}
	return ids
}

func exportConns(connID string, exports map[string]string) []string {
	return append([]string{connID}, urlConns(storage.Default.Parse, slices.Collect(maps.Values(exports))...)...)
}

// urlConns are the connections URLs name (s3://conn_id@bucket/key); a URL
// that does not parse names none here (the task says what is wrong).
func urlConns(parse func(string) (storage.Location, error), urls ...string) []string {
	var ids []string
	for _, u := range urls {
		if loc, err := parse(u); err == nil && loc.ConnID != "" {
			ids = append(ids, loc.ConnID)
		}
	}
	return ids
}

// ConnectionIDs: each backend's, the storage connection, and those the
// storage prefixes name.
func (in SweepAllInput) ConnectionIDs() []string {
	ids := []string{in.StorageConnID}
	for _, b := range in.Backends {
		ids = append(ids, b.ConnectionIDs()...)
	}
	return append(ids, urlConns(storage.Default.ParsePrefix, in.Storage...)...)
}
