package modal

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// SpecProblems: what Modal refuses in any spec with these options
// (registry.SpecChecker), so a bundle config asking for it fails when it
// loads; the driver offers the same rules to the portable layer, which
// refuses them before Create.
func (o BundleOptions) SpecProblems(spec driver.Spec) []driver.Problem {
	ps := lifetimeProblems(spec)
	if _, err := mapNetwork(spec.NetworkPolicy(), o.EgressEnforcement); err != nil {
		msg := err.Error()
		var e *driver.Error
		if errors.As(err, &e) && e.Err != nil {
			msg = e.Err.Error()
		}
		ps = append(ps, driver.Problem{Field: "network", Msg: strings.TrimPrefix(msg, "network: ")})
	}
	return ps
}

// SpecProblems: BundleOptions.SpecProblems with this driver's options.
func (d *Driver) SpecProblems(spec driver.Spec) []driver.Problem {
	return BundleOptions{EgressEnforcement: d.opts.EgressEnforcement}.SpecProblems(spec)
}

// lifetimeProblems: Modal's bounds on a sandbox's lifetime.
func lifetimeProblems(spec driver.Spec) []driver.Problem {
	switch {
	case spec.Lifetime < MinTimeout:
		return []driver.Problem{{Field: "lifetime", Msg: fmt.Sprintf("%v is shorter than Modal's %v minimum for an Airflow sandbox; give a lifetime of at least 2m", spec.Lifetime, MinTimeout)}}
	case spec.Lifetime%time.Second != 0:
		return []driver.Problem{{Field: "lifetime", Msg: fmt.Sprintf("%v is not a whole number of seconds", spec.Lifetime)}}
	}
	return nil
}
