package bundles

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/footer"
)

// Supervisor schema versions (spec 3.8). A bundle declares one in its
// manifest; Airflow's coordinator runs it only if it knows that exact
// version, and the runtime then sends only what that version defines.
const (
	// Schema33 is the one version Airflow 3.3 (task SDK 1.3) knows.
	Schema33 = "2026-06-16"
	// Schema34 is Airflow 3.4's: it adds TIRunContext.arg_bindings (the
	// stub call's arguments) and TaskState.retry_reason.
	Schema34 = "2026-10-30"
)

// DefaultAirflow is the Airflow release bundles target unless told
// otherwise: the released one.
const DefaultAirflow = "3.3"

// SchemaVersion is one supervisor schema version and the first Airflow
// release that knows it.
type SchemaVersion struct {
	Version string // YYYY-MM-DD
	Airflow string // e.g. "3.3"
}

// SchemaVersions lists the versions this runtime speaks, oldest first.
var SchemaVersions = []SchemaVersion{{Schema33, "3.3"}, {Schema34, "3.4"}}

// KnownSchemaVersions describes SchemaVersions for messages.
func KnownSchemaVersions() string {
	parts := make([]string, len(SchemaVersions))
	for i, v := range SchemaVersions {
		parts[i] = fmt.Sprintf("%s (Airflow %s)", v.Version, v.Airflow)
	}
	return strings.Join(parts, ", ")
}

// CheckSchemaVersion accepts only a version this runtime speaks.
func CheckSchemaVersion(v string) error {
	for _, k := range SchemaVersions {
		if k.Version == v {
			return nil
		}
	}
	return fmt.Errorf("supervisor schema version %q is not one this bundle speaks; known: %s", v, KnownSchemaVersions())
}

// SchemaForAirflow returns the schema version to declare for a target
// Airflow release ("3.3", "3.4", or a patch release such as "3.3.2").
func SchemaForAirflow(release string) (string, error) {
	known, err := AirflowSchemaVersions(release)
	if err != nil {
		return "", err
	}
	return known[len(known)-1], nil
}

// AirflowSchemaVersions lists the schema versions an Airflow release's
// coordinator accepts: its own and every older one (3.3 knows only
// 2026-06-16).
func AirflowSchemaVersions(release string) ([]string, error) {
	minor := release
	if parts := strings.Split(release, "."); len(parts) == 3 {
		minor = parts[0] + "." + parts[1]
	}
	var known []string
	for _, v := range SchemaVersions {
		known = append(known, v.Version)
		if v.Airflow == minor {
			return known, nil
		}
	}
	targets := make([]string, len(SchemaVersions))
	for i, v := range SchemaVersions {
		targets[i] = v.Airflow
	}
	return nil, fmt.Errorf("Airflow %q: this bundle targets Airflow %s (released Airflow with an ExecutableCoordinator starts at 3.3)", release, strings.Join(targets, " or "))
}

// schemaAtLeast reports whether version v includes what version min added.
// Versions are dates, so they order as strings.
func schemaAtLeast(v, min string) bool { return v >= min }

var declared struct {
	once    sync.Once
	version string
	warning string
}

// DeclaredSchemaVersion is the supervisor schema version this executable's
// own AFBNDL01 manifest declares: the version Airflow checked before it
// started the bundle, and so the one to speak. An executable without a
// footer (a plain go build, or run by airflow-go-worker run before
// packing) speaks SupervisorSchemaVersion.
func DeclaredSchemaVersion() string {
	v, _ := declaredSchema()
	return v
}

// declaredSchema also returns a warning for the task log when the footer
// could not be read or declares a version this runtime does not speak.
func declaredSchema() (version, warning string) {
	declared.once.Do(func() {
		declared.version = SupervisorSchemaVersion
		exe, err := os.Executable()
		if err != nil {
			declared.warning = fmt.Sprintf("cannot find this executable to read its declared supervisor schema version (%v); speaking %s", err, SupervisorSchemaVersion)
			return
		}
		m, ok, err := footer.ReadManifest(exe)
		switch {
		case err != nil:
			declared.warning = fmt.Sprintf("reading this bundle's manifest: %v; speaking supervisor schema %s", err, SupervisorSchemaVersion)
		case !ok || m.SDK.SupervisorSchemaVersion == "":
		case CheckSchemaVersion(m.SDK.SupervisorSchemaVersion) != nil:
			declared.warning = fmt.Sprintf("this bundle declares supervisor schema %s, which this runtime does not speak (known: %s); speaking %s, whose messages every later version accepts", m.SDK.SupervisorSchemaVersion, KnownSchemaVersions(), SupervisorSchemaVersion)
		default:
			declared.version = m.SDK.SupervisorSchemaVersion
		}
	})
	return declared.version, declared.warning
}
