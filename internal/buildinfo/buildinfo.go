// Package buildinfo says which version of this module a binary was built
// from, for manifests and `version`.
package buildinfo

import "runtime/debug"

// ModulePath is this module, whose version the manifest reports.
const ModulePath = "github.com/airflow-sandbox/airflow-go-worker"

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
