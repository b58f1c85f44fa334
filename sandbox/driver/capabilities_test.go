package driver

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// Every capability is in the table and answered by Has, network ones
// included: a capability added to Capabilities but not to the table (or
// the other way round) fails here.
func TestEveryCapabilityIsInTheTableAndHas(t *testing.T) {
	fields := reflect.TypeFor[Capabilities]().NumField() - 1 // all but Hints
	if n := len(capabilityTable) - 1; n != fields {
		t.Fatalf("the table has %d capabilities, Capabilities %d bools", n, fields)
	}
	for c := CapCPU; int(c) < len(capabilityTable); c++ {
		var caps Capabilities
		v := reflect.ValueOf(&caps).Elem()
		if caps.Has(c) {
			t.Fatalf("%s: an empty Capabilities has it", c)
		}
		v.Field(int(c) - 1).SetBool(true) // the bools are in table order
		if !caps.Has(c) || caps.String() != c.String() {
			t.Errorf("%s: Has %v, String %q after setting %s", c, caps.Has(c), caps.String(), reflect.TypeFor[Capabilities]().Field(int(c)-1).Name)
		}
	}
}

// The one refusal: each field, the backend, its hint, the backends that
// could, and one closing advice; an open and a blocked network are two
// capabilities of one field, and both have a "which can" answer.
func TestCheckSpecIsTheOneRefusal(t *testing.T) {
	caps := Capabilities{Memory: true, BlockNetwork: true, Hints: map[Capability]string{CapOpenNetwork: "set open_network: true"}}
	able := func(c Capability) []string {
		if c == CapOpenNetwork || c == CapGPU {
			return []string{"modal"}
		}
		return nil
	}
	spec := Spec{MemoryMiB: 512, GPU: "A10G", Network: NetworkPolicy{Open: true}}
	if got := Needs(spec); !reflect.DeepEqual(got, []Capability{CapMemory, CapGPU, CapOpenNetwork}) {
		t.Fatalf("Needs: %v", got)
	}
	err := CheckSpec("tiny", caps, spec, able)
	want := "sandbox spec: gpu: the tiny backend cannot provide GPUs, which modal can; " +
		"network.block: the tiny backend cannot provide an open network (block: false) (set open_network: true), which modal can; " +
		"remove the setting or choose another backend"
	if err == nil || err.Error() != want || !errors.Is(err, ErrRefused) || !IsFinal(err) {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
	if err := CheckSpec("tiny", caps, Spec{}, nil); err != nil {
		t.Fatalf("the default spec (a blocked network) is within caps: %v", err)
	}
	err = CheckSpec("none", Capabilities{}, Spec{}, nil)
	if err == nil || !strings.Contains(err.Error(), "network.block: the none backend cannot provide a blocked network") {
		t.Fatalf("a backend without a blocked network: %v", err)
	}
	for _, net := range []NetworkPolicy{{AllowHosts: []string{"pypi.org"}}, {AllowCIDRs: []string{"192.0.2.0/24"}}} {
		if got := Needs(Spec{Network: net}); len(got) != 1 || got[0] == CapBlockNetwork {
			t.Errorf("an allowlist needs the allowlist, not a plain blocked network: %v", got)
		}
	}
}
