// Package schema holds the supervisor schema versions (spec 3.8) a bundle
// may declare and speak, and reads the one this executable declares.
package schema

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/footer"
)

// Default is the version a bundle declares unless packed for another
// Airflow: Airflow 3.3's, the only one released Airflow knows. Airflow
// accepts a bundle only when its declared version exactly matches one it
// knows; `pack --airflow` or `--supervisor-schema-version` chooses another
// (see All).
const Default = V33

// Supervisor schema versions (spec 3.8). A bundle declares one in its
// manifest; Airflow's coordinator runs it only if it knows that exact
// version, and the runtime then sends only what that version defines.
const (
	// V33 is the one version Airflow 3.3 (task SDK 1.3) knows.
	V33 = "2026-06-16"
	// V34 is Airflow 3.4's: it adds TIRunContext.arg_bindings (the
	// stub call's arguments) and TaskState.retry_reason.
	V34 = "2026-10-30"
)

// DefaultAirflow is the Airflow release bundles target unless told
// otherwise: the released one.
const DefaultAirflow = "3.3"

// Release is one supervisor schema version and the first Airflow
// release that knows it.
type Release struct {
	Version string // YYYY-MM-DD
	Airflow string // e.g. "3.3"
}

// All lists the versions this runtime speaks, oldest first.
var All = []Release{{V33, "3.3"}, {V34, "3.4"}}

// Known describes All for messages.
func Known() string {
	parts := make([]string, len(All))
	for i, v := range All {
		parts[i] = fmt.Sprintf("%s (Airflow %s)", v.Version, v.Airflow)
	}
	return strings.Join(parts, ", ")
}

// Check accepts only a version this runtime speaks.
func Check(v string) error {
	for _, k := range All {
		if k.Version == v {
			return nil
		}
	}
	return fmt.Errorf("supervisor schema version %q is not one this bundle speaks; known: %s", v, Known())
}

// ForAirflow returns the schema version to declare for a target
// Airflow release ("3.3", "3.4", or a patch release such as "3.3.2").
func ForAirflow(release string) (string, error) {
	known, err := AirflowKnows(release)
	if err != nil {
		return "", err
	}
	return known[len(known)-1], nil
}

// AirflowKnows lists the schema versions an Airflow release's
// coordinator accepts: its own and every older one (3.3 knows only
// 2026-06-16).
func AirflowKnows(release string) ([]string, error) {
	minor := release
	if parts := strings.Split(release, "."); len(parts) == 3 {
		minor = parts[0] + "." + parts[1]
	}
	var known []string
	for _, v := range All {
		known = append(known, v.Version)
		if v.Airflow == minor {
			return known, nil
		}
	}
	targets := make([]string, len(All))
	for i, v := range All {
		targets[i] = v.Airflow
	}
	return nil, fmt.Errorf("Airflow %q: this bundle targets Airflow %s (released Airflow with an ExecutableCoordinator starts at 3.3)", release, strings.Join(targets, " or "))
}

// AtLeast reports whether version v includes what version min added.
// Versions are dates, so they order as strings.
func AtLeast(v, min string) bool { return v >= min }

var declared struct {
	once    sync.Once
	version string
	warning string
}

// Declared is the supervisor schema version this executable's
// own AFBNDL01 manifest declares: the version Airflow checked before it
// started the bundle, and so the one to speak. An executable without a
// footer (a plain go build, or run by airflow-go-worker run before
// packing) speaks Default.
func Declared() string {
	v, _ := DeclaredWithWarning()
	return v
}

// DeclaredWithWarning is Declared, and also returns a warning for the task log when the footer
// could not be read or declares a version this runtime does not speak.
func DeclaredWithWarning() (version, warning string) {
	declared.once.Do(func() {
		declared.version = Default
		exe, err := ownFile()
		if err != nil {
			declared.warning = fmt.Sprintf("cannot find this executable to read its declared supervisor schema version (%v); speaking %s", err, Default)
			return
		}
		m, ok, err := footer.ReadManifest(exe)
		switch {
		case err != nil:
			if path, perr := os.Executable(); perr == nil && exe != path {
				err = fmt.Errorf("%w (this executable: %s)", err, path)
			}
			declared.warning = fmt.Sprintf("reading this bundle's manifest: %v; speaking supervisor schema %s", err, Default)
		case !ok || m.SDK.SupervisorSchemaVersion == "":
		case Check(m.SDK.SupervisorSchemaVersion) != nil:
			declared.warning = fmt.Sprintf("this bundle declares supervisor schema %s, which this runtime does not speak (known: %s); speaking %s, whose messages every later version accepts", m.SDK.SupervisorSchemaVersion, Known(), Default)
		default:
			declared.version = m.SDK.SupervisorSchemaVersion
		}
	})
	return declared.version, declared.warning
}

// ownFile names the file this process runs. On Linux that is
// /proc/self/exe, which opens the very file started (even if its path has
// since been replaced) without the readlink os.Executable costs every task
// process at start.
func ownFile() (string, error) {
	if runtime.GOOS == "linux" {
		return "/proc/self/exe", nil
	}
	return os.Executable()
}
