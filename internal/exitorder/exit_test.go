package exitorder

import (
	"strings"
	"testing"
)

func TestExitHolderWanted(t *testing.T) {
	for _, tc := range []struct {
		value   string
		set     bool
		on      bool
		warning string
	}{
		{set: false, on: true},
		{value: "", set: true, on: true},
		{value: "on", set: true, on: true},
		{value: "off", set: true, on: false},
		{value: "Off", set: true, on: false, warning: `"Off" is neither on nor off`},
		{value: "0", set: true, on: false, warning: `"0" is neither on nor off`},
	} {
		lookup := func(name string) (string, bool) {
			if name != HolderEnv {
				t.Fatalf("looked up %s", name)
			}
			return tc.value, tc.set
		}
		on, warning := holderWanted(lookup)
		if on != tc.on || (tc.warning == "") != (warning == "") || !strings.Contains(warning, tc.warning) {
			t.Errorf("%s=%q (set %v): on %v, warning %q; want on %v, warning containing %q", HolderEnv, tc.value, tc.set, on, warning, tc.on, tc.warning)
		}
	}
}
