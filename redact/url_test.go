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

// Issue 29, item 5: a host carried secrets where URL looked for none: in a
// bare query key, in ";" parameters (JDBC- and ODBC-style hosts, path
// parameters), and, for a connection's host, in its path.
func TestURLHidesBareQueryKeysAndSemicolonParameters(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"https://example.com/?tok9", "https://example.com/?***"},
		{"https://example.com/hook?a=1&tok9", "https://example.com/hook?a=***&***"},
		{"db.example.com;password=pw", "db.example.com;password=***"},
		{"sqlserver://db:1433;user=usr;password=pw", "sqlserver://db:1433;user=***;password=***"},
		{"https://example.com/app;jsessionid=tok9?x=1", "https://example.com/app;jsessionid=***"},
		{"db.example.com;tok9", "db.example.com;***"},
		{"usr;x:pw@db.example.com;tok9", "***@db.example.com;***"},
		{"https://example.com/?", "https://example.com/?"},
	} {
		got := URL(c.in)
		if got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
		for _, secret := range []string{"pw", "tok9", "usr"} {
			if strings.Contains(got, secret) {
				t.Errorf("URL(%q) = %q still shows %q", c.in, got, secret)
			}
		}
	}
}

func TestHostHidesThePathToo(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"https://hooks.example.com/services/T0TOK9/B0TOK9/tok9tok9", "https://hooks.example.com/***"},
		{"https://api.example.com/bot12345:tok9/", "https://api.example.com/***"},
		{"example.com/tok9", "example.com/***"},
		{"https://usr:pw@example.com/tok9?tok9#tok9", "https://***@example.com/***?***#***"},
		{"https://example.com/x;tok9", "https://example.com/***;***"},
		{"https://example.com/", "https://example.com/"},
		{"db.example.com:5432", "db.example.com:5432"},
	} {
		got := Host(c.in)
		if got != c.want {
			t.Errorf("Host(%q) = %q, want %q", c.in, got, c.want)
		}
		for _, secret := range []string{"pw", "tok9", "TOK9", "usr"} {
			if strings.Contains(got, secret) {
				t.Errorf("Host(%q) = %q still shows %q", c.in, got, secret)
			}
		}
	}
	if got := URL("https://example.com/reports/2026/q1.csv"); got != "https://example.com/reports/2026/q1.csv" {
		t.Errorf("URL keeps the path (rendered fields show where data goes): %q", got)
	}
}
