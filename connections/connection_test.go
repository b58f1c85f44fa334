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

// String is what a log line shows of a connection: a host's path (a
// webhook's token), its query values and its userinfo stay hidden.
func TestStringHidesWhatTheHostCarries(t *testing.T) {
	c := Connection{ConnID: "hook", ConnType: "http", Host: "https://bot:tok3n@hooks.example.com/services/T0/B0/s3cr3tpath?sig=abc;key=v4l", Port: 443, Password: "pw"}
	got := c.String()
	if !strings.Contains(got, "hooks.example.com") || !strings.Contains(got, "password=***") {
		t.Fatalf("String() = %q: want the host's name and the password marked", got)
	}
	for _, secret := range []string{"s3cr3tpath", "tok3n", "abc", "v4l", "pw)"} {
		if strings.Contains(got, secret) {
			t.Errorf("String() = %q shows %q", got, secret)
		}
	}
}
