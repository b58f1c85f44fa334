package bundles

import (
	"runtime/debug"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/footer"
)

const (
	// SupervisorSchemaVersion is the supervisor schema version a bundle
	// declares unless packed for another Airflow (spec 3.8): Airflow 3.3's,
	// the only one released Airflow knows. Airflow accepts a bundle only when
	// its declared version exactly matches one it knows; `pack --airflow` or
	// `--supervisor-schema-version` chooses another (see SchemaVersions).
	SupervisorSchemaVersion = Schema33
	// MetadataVersion is airflow_bundle_metadata_version.
	MetadataVersion = footer.MetadataVersion
	// ModulePath is this module, whose version the manifest reports.
	ModulePath = "github.com/airflow-sandbox/airflow-go-worker"
)

// Manifest describes the registered tasks, in the one manifest type that
// pack embeds and inspect and the supervisor read (package bundles/footer).
// Empty arguments take Version() and SupervisorSchemaVersion.
func (b *Bundle) Manifest(sdkVersion, schemaVersion string) footer.Manifest {
	if sdkVersion == "" {
		sdkVersion = Version()
	}
	if schemaVersion == "" {
		schemaVersion = SupervisorSchemaVersion
	}
	m := footer.Manifest{
		MetadataVersion: MetadataVersion,
		SDK:             footer.SDK{Language: "go", Version: sdkVersion, SupervisorSchemaVersion: schemaVersion},
		Dags:            map[string]footer.Dag{},
	}
	for _, ref := range b.Tasks() {
		d := m.Dags[ref.DagID]
		d.Tasks = append(d.Tasks, ref.TaskID)
		m.Dags[ref.DagID] = d
	}
	return m
}

// Version is this module's version from the binary's build info, or
// "(devel)" for a source build.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	if bi.Main.Path == ModulePath && bi.Main.Version != "" {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == ModulePath && d.Version != "" {
			return d.Version
		}
	}
	// A source build: name the commit so operators can still tell builds apart.
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		return "(devel)+" + rev + dirty
	}
	return "(devel)"
}
