package bundles

import (
	"reflect"
	"strings"
	"testing"
)

type netIn struct {
	Block bool     `json:"block"`
	Hosts []string `json:"allow_hosts"`
}

// A value of the wrong shape is described in the terms a Dag author writes
// (mapping, list, true or false), naming the nested key that is wrong, never
// by Go type names such as *bundles.netIn.
func TestConvertIntoNamesTheExpectedShape(t *testing.T) {
	cases := []struct {
		name string
		dst  any
		v    any
		want []string
	}{
		{"bool for a struct", (*netIn)(nil), true, []string{"JSON bool true", "want a mapping"}},
		{"wrong nested field", (*netIn)(nil), map[string]any{"block": "maybe"}, []string{`"block" must be true or false, not a JSON string`}},
		{"string for a list", []string(nil), "x", []string{`JSON string "x"`, "want a list"}},
		{"string for a number", 0, "lots", []string{`JSON string "lots"`, "want a whole number"}},
		{"list for a map", map[string]string(nil), []any{"a"}, []string{"JSON array", "want a mapping"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst := reflect.New(reflect.TypeOf(c.dst)).Elem()
			err := convertInto(dst, c.v)
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "bundles.") || strings.Contains(err.Error(), "map[string]") {
				t.Errorf("error %q names a Go type", err)
			}
		})
	}
}
