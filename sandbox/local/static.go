package local

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// SpecProblems: what the local backend refuses in any spec on any host
// (registry.SpecChecker), so a bundle config asking for it fails when it
// loads; the driver offers the same rules to the portable layer, and
// Create refuses what depends on this host (limits it cannot enforce,
// image directories) besides.
func (o BundleOptions) SpecProblems(spec driver.Spec) []driver.Problem {
	return staticProblems(spec, o.IgnoreImage)
}

// SpecProblems: the rules BundleOptions.SpecProblems lists, with this
// driver's ignore_image, which the portable layer applies before Create.
func (d *Driver) SpecProblems(spec driver.Spec) []driver.Problem {
	return staticProblems(spec, d.ignoreImage)
}

// staticProblems are the local backend's rules that need no I/O: where the
// workdir may be, and that an image is a directory, not a registry image
// (unless ignoreImage runs those on the host's userland).
func staticProblems(spec driver.Spec, ignoreImage bool) []driver.Problem {
	var ps []driver.Problem
	wd := spec.Workdir
	if wd == "/" || wd == "/tmp" {
		ps = append(ps, driver.Problem{Field: "workdir", Msg: fmt.Sprintf("%q cannot be the local sandbox's workdir; use a directory such as /workspace", wd)})
	}
	for _, sys := range systemDirs {
		if wd == sys || strings.HasPrefix(wd, sys+"/") {
			ps = append(ps, driver.Problem{Field: "workdir", Msg: fmt.Sprintf("%q is inside the read-only system directory %s; use a directory such as /workspace", wd, sys)})
		}
	}
	if img := spec.Image; img != "" && !filepath.IsAbs(img) && !ignoreImage {
		ps = append(ps, driver.Problem{Field: "image", Msg: fmt.Sprintf("%q looks like a registry image, which the local backend cannot pull (it runs on the host's userland); leave image empty, give an unpacked root filesystem directory, or set the local backend option ignore_image: true", img)})
	}
	return ps
}
