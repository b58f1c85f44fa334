package driver

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// The zero value is the blocked network, in Go and on the wire: a Go user
// who fills a Spec without a network, and a Dag author who writes a
// network without block, both get no network.
func TestNetworkPolicyZeroValueBlocks(t *testing.T) {
	var zero NetworkPolicy
	if zero.Open || Needs(Spec{})[0] != CapBlockNetwork {
		t.Fatalf("NetworkPolicy{} must be the blocked network: %+v needs %v", zero, Needs(Spec{}))
	}
	for wire, want := range map[string]NetworkPolicy{
		`{}`:                            {},
		`{"block": true}`:               {},
		`{"allow_hosts": ["pypi.org"]}`: {AllowHosts: []string{"pypi.org"}},
		`{"block": false}`:              {Open: true},
	} {
		var got NetworkPolicy
		if err := json.Unmarshal([]byte(wire), &got); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s decodes to %+v (%v), want %+v", wire, got, err, want)
		}
		out, err := json.Marshal(got)
		var back NetworkPolicy
		if err != nil || json.Unmarshal(out, &back) != nil || !reflect.DeepEqual(back, want) {
			t.Errorf("%+v does not survive a round trip: %s -> %+v", got, out, back)
		}
		if !strings.Contains(string(out), `"block":`) {
			t.Errorf("%s: the wire form always says block, got %s", wire, out)
		}
	}
	// A misspelt block must not silently leave the network as it was.
	var p NetworkPolicy
	if err := json.Unmarshal([]byte(`{"blok": false}`), &p); err == nil || !strings.Contains(err.Error(), "block: true|false") {
		t.Fatalf("a misspelt key: %v", err)
	}
	// A sandbox's metadata written before the policy was a value: the
	// Spec's network decodes the same.
	var s Spec
	if err := json.Unmarshal([]byte(`{"network": {"block": false}}`), &s); err != nil || !s.Network.Open {
		t.Fatalf("an open network in old metadata: %+v %v", s.Network, err)
	}
	var old Spec
	if err := json.Unmarshal([]byte(`{}`), &old); err != nil || old.Network.Open {
		t.Fatalf("no network in old metadata: %v", err)
	}
}
