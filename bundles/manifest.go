package bundles

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime/debug"

	"gopkg.in/yaml.v3"
)

const (
	// SupervisorSchemaVersion is the supervisor schema version a bundle
	// declares unless packed for another Airflow (spec 3.8): Airflow 3.3's,
	// the only one released Airflow knows. Airflow accepts a bundle only when
	// its declared version exactly matches one it knows; `pack --airflow` or
	// `--supervisor-schema-version` chooses another (see SchemaVersions).
	SupervisorSchemaVersion = Schema33
	// MetadataVersion is airflow_bundle_metadata_version.
	MetadataVersion = "1.0"
	// ModulePath is this module, whose version the manifest reports.
	ModulePath = "github.com/airflow-sandbox/airflow-go-worker"
)

// Manifest is what --airflow-metadata prints and what pack embeds in the
// AFBNDL01 footer (spec 2.3 and 2.5).
type Manifest struct {
	AirflowBundleMetadataVersion string                 `yaml:"airflow_bundle_metadata_version" json:"airflow_bundle_metadata_version"`
	SDK                          ManifestSDK            `yaml:"sdk" json:"sdk"`
	Dags                         map[string]ManifestDag `yaml:"dags" json:"dags"`
}

// ManifestSDK is the manifest's sdk section.
type ManifestSDK struct {
	Language                string `yaml:"language" json:"language"`
	Version                 string `yaml:"version" json:"version"`
	SupervisorSchemaVersion string `yaml:"supervisor_schema_version" json:"supervisor_schema_version"`
}

// ManifestDag lists a Dag's task ids in registration order.
type ManifestDag struct {
	Tasks []string `yaml:"tasks" json:"tasks"`
}

// Manifest describes the registered tasks. Empty arguments take Version()
// and SupervisorSchemaVersion.
func (b *Bundle) Manifest(sdkVersion, schemaVersion string) Manifest {
	if sdkVersion == "" {
		sdkVersion = Version()
	}
	if schemaVersion == "" {
		schemaVersion = SupervisorSchemaVersion
	}
	m := Manifest{
		AirflowBundleMetadataVersion: MetadataVersion,
		SDK:                          ManifestSDK{Language: "go", Version: sdkVersion, SupervisorSchemaVersion: schemaVersion},
		Dags:                         map[string]ManifestDag{},
	}
	for _, ref := range b.Tasks() {
		d := m.Dags[ref.DagID]
		d.Tasks = append(d.Tasks, ref.TaskID)
		m.Dags[ref.DagID] = d
	}
	return m
}

// Encode renders the manifest as "yaml" (the default) or "json" (4-space
// indent plus newline, as Airflow's Go SDK prints it).
func (m Manifest) Encode(format string) ([]byte, error) {
	switch format {
	case "", "yaml":
		var buf bytes.Buffer
		enc := yaml.NewEncoder(&buf)
		enc.SetIndent(2)
		if err := enc.Encode(m); err != nil {
			return nil, err
		}
		enc.Close()
		return buf.Bytes(), nil
	case "json":
		out, err := json.MarshalIndent(m, "", "    ")
		if err != nil {
			return nil, err
		}
		return append(out, '\n'), nil
	}
	return nil, fmt.Errorf("unknown --format %q: use yaml or json", format)
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
