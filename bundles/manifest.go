package bundles

import (
	"github.com/airflow-sandbox/airflow-go-worker/bundles/footer"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/schema"
	"github.com/airflow-sandbox/airflow-go-worker/internal/buildinfo"
)

// manifest describes the registered tasks, in the one manifest type that
// pack embeds and inspect and the supervisor read (package bundles/footer).
// Empty arguments take buildinfo.Version() and schema.Default.
func (b *Bundle) manifest(sdkVersion, schemaVersion string) footer.Manifest {
	if sdkVersion == "" {
		sdkVersion = buildinfo.Version()
	}
	if schemaVersion == "" {
		schemaVersion = schema.Default
	}
	m := footer.Manifest{
		MetadataVersion: footer.MetadataVersion,
		SDK:             footer.SDK{Language: "go", Version: sdkVersion, SupervisorSchemaVersion: schemaVersion},
		Dags:            map[string]footer.Dag{},
	}
	for _, ref := range b.refs() {
		d := m.Dags[ref.DagID]
		d.Tasks = append(d.Tasks, ref.TaskID)
		m.Dags[ref.DagID] = d
	}
	return m
}
