package supervisor

import (
	"fmt"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/footer"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/schema"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// BundleSchema is the schema version the bundle speaks, refused as the
// coordinator of s.Airflow refuses a version it does not know.
func (s *Supervisor) BundleSchema() (string, error) {
	release := s.Airflow
	if release == "" {
		release = schema.DefaultAirflow
	}
	accepted, err := schema.AirflowKnows(release)
	if err != nil {
		return "", err
	}
	version := s.SchemaVersion
	if version == "" {
		m, ok, err := footer.ReadManifest(s.Executable)
		if err != nil {
			return "", fmt.Errorf("reading the bundle's manifest: %w", err)
		}
		version = schema.Default
		if ok && m.SDK.SupervisorSchemaVersion != "" {
			version = m.SDK.SupervisorSchemaVersion
		}
	}
	for _, a := range accepted {
		if a == version {
			return version, nil
		}
	}
	return "", fmt.Errorf("Airflow %s's coordinator would reject %s: \"Version '%s' not found in supervisor schema bundle\" (it knows %s); pack the bundle with --airflow %s, or run it as the Airflow it was packed for", release, s.Executable, version, strings.Join(accepted, ", "), release)
}

// StartupBody is the StartupDetails body Airflow's supervisor sends a bundle
// that declares schema: its head shape downgraded to that version, as
// Airflow's schema migrator does. 2026-06-16 (Airflow 3.3) has no
// ti_context.arg_bindings, so a 3.3 bundle never sees a stub call's
// arguments.
func StartupBody(sd protocol.StartupDetails, version string) protocol.Body {
	return sd.Body(schema.AtLeast(version, schema.V34))
}
