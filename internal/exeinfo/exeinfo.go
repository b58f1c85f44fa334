// Package exeinfo reads another executable's Go build info without running
// it: whether it was built with this module, and its main module's version,
// for pack and check. It is apart from internal/buildinfo, which every
// bundle links for its own version: reading a file's build info links
// debug/buildinfo and with it the ELF, Mach-O, PE, XCOFF, Plan 9 and DWARF
// readers and two decompressors, about 0.4 MB that a task process would map
// and pay for at every start.
package exeinfo

import (
	gobuildinfo "debug/buildinfo"

	"github.com/airflow-sandbox/airflow-go-worker/internal/buildinfo"
)

// BuiltWithThisModule reports whether the executable at exe was built with
// this module (as its main module or a dependency): a bundle with this
// module's runtime and commands.
func BuiltWithThisModule(exe string) bool {
	bi, err := gobuildinfo.ReadFile(exe)
	if err != nil {
		return false
	}
	if bi.Main.Path == buildinfo.ModulePath {
		return true
	}
	for _, d := range bi.Deps {
		if d.Path == buildinfo.ModulePath {
			return true
		}
	}
	return false
}

// MainVersion is the version of the main module exe was built from, or
// "(devel)" when it has none or exe is not a Go executable.
func MainVersion(exe string) string {
	bi, err := gobuildinfo.ReadFile(exe)
	if err != nil || bi.Main.Version == "" {
		return "(devel)"
	}
	return bi.Main.Version
}
