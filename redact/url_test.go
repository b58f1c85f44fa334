package redact

import (
	"strings"
	"testing"
)

// Issue 19, hole 5: the self-test's connection returned a connection's host
// as is, userinfo and query string included, to whoever triggered the run.
func TestURLHidesUserinfoQueryValuesAndFragment(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"https://usr:pw@example.com/?token=tok9&x=1", "https://***@example.com/?token=***&x=***"},
		{"usr:pw@example.com/?token=tok9", "***@example.com/?token=***"},
		{"TOKEN9@github.com", "***@github.com"},
		{"postgres://u:pw@db:5432/app?sslmode=require&password=pw", "postgres://***@db:5432/app?sslmode=***&password=***"},
		{"https://example.com/cb#access_token=tok9", "https://example.com/cb#***"},
		{"%zz:pw@example.com/?t=tok9", "example.com/***"}, // unparseable: the host alone
		{"db.example.com", "db.example.com"},
		{"example.com:5432", "example.com:5432"},
		{"https://example.com/path", "https://example.com/path"},
	} {
		got := URL(c.in)
		if got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
		for _, secret := range []string{"pw", "tok9", "TOKEN9", "usr"} {
			if strings.Contains(got, secret) {
				t.Errorf("URL(%q) = %q still shows %q", c.in, got, secret)
			}
		}
	}
}
