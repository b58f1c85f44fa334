package connections

import (
	"strings"
	"testing"
)

func TestExtraString(t *testing.T) {
	c := Connection{ConnID: "c1"}
	if s, err := c.ExtraString("region_name", "  eu-west-1 "); s != "eu-west-1" || err != nil {
		t.Errorf("a string: %q, %v; want it trimmed", s, err)
	}
	if s, err := c.ExtraString("region_name", nil); s != "" || err != nil {
		t.Errorf("absent: %q, %v; want empty and no error", s, err)
	}
	_, err := c.ExtraString("region_name", 42.0)
	if err == nil || !strings.Contains(err.Error(), `connection "c1": extra region_name must be a string, got float64`) {
		t.Errorf("a number: %v; want an error naming the connection and the key", err)
	}
}
