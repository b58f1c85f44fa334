package opensandbox

import (
	"fmt"
	"math"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// SpecProblems: what OpenSandbox refuses in any spec (registry.SpecChecker),
// so a bundle config asking for it fails when it loads; the driver offers
// the same rules to the portable layer, which refuses them before Create.
func (o BundleOptions) SpecProblems(spec driver.Spec) []driver.Problem { return specProblems(spec) }

// SpecProblems: the same rules, for the portable layer.
func (d *Driver) SpecProblems(spec driver.Spec) []driver.Problem { return specProblems(spec) }

// specProblems are OpenSandbox's rules on a spec that need no server.
func specProblems(spec driver.Spec) []driver.Problem {
	var ps []driver.Problem
	add := func(field, format string, a ...any) {
		ps = append(ps, driver.Problem{Field: field, Msg: fmt.Sprintf(format, a...)})
	}
	if spec.Lifetime < MinTimeout {
		add("lifetime", "OpenSandbox needs a lifetime of at least %v (got %v)", MinTimeout, spec.Lifetime)
	}
	if spec.GPU != "" {
		add("gpu", "this driver does not attach GPUs on OpenSandbox (asked for %q); remove gpu or use a backend with GPUs such as modal", spec.GPU)
	}
	net := spec.NetworkPolicy()
	if len(net.AllowCIDRs) > 0 {
		add("network", "allow_cidrs cannot be used with OpenSandbox: its egress sidecar enforces CIDR rules only in dns+nft mode and the enforcement mode cannot be verified; allow host names instead")
	}
	for _, h := range net.AllowHosts {
		// The sidecar takes IP and CIDR targets in the same list, with the
		// same unverifiable enforcement as allow_cidrs; so they are refused
		// here too, as are URLs and ports, which are no target at all.
		if msg := hostTargetProblem(h); msg != "" {
			add("network", "allow_hosts entry %q %s", h, msg)
		}
	}
	if spec.CPU > 0 && math.Round(spec.CPU*1000) < 1 {
		add("cpu", "%v cores is below OpenSandbox's 0.001-core resolution", spec.CPU)
	}
	return ps
}
