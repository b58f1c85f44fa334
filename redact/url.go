package redact

import (
	"net/url"
	"strings"
)

// URL hides what a URL or host field may carry besides where it points:
// the whole userinfo (a user name can be a token too), the value of every
// query parameter and of the fragment (signatures, tokens), keeping the
// parameter names, a bare query key ("?TOKEN") whole, and the values of
// ";" parameters ("db;password=...", "/p;jsessionid=...") the same way.
// A value that does not parse keeps its host alone, since what cannot be
// read cannot be shown safe. Scheme-less values ("user:pw@host/path") are
// read as a network path.
func URL(raw string) string { return redactURL(raw, false) }

// Host is URL for a connection's host field, which should say where a
// service is, not which resource: its path is hidden too, since a
// webhook's or a bot API's token is often a path segment
// (https://hooks.example.com/services/T0/B0/XXXX).
func Host(raw string) string { return redactURL(raw, true) }

func redactURL(raw string, hidePath bool) string {
	// ";" parameters, after the userinfo (hidden whole anyway): cut off
	// before parsing, since Go's parser takes them for part of the host or
	// refuses them as a port; whatever follows the first ";" (a query
	// included) is read as parameters.
	params := ""
	from := strings.LastIndexByte(raw, '@') + 1
	if i := strings.IndexByte(raw[from:], ';'); i >= 0 {
		raw, params = raw[:from+i], raw[from+i+1:]
	}
	out := redactBase(raw, hidePath)
	if params != "" || strings.HasSuffix(raw, ";") {
		out += ";" + maskParams(params, ";")
	}
	return out
}

func redactBase(raw string, hidePath bool) string {
	bare := !strings.Contains(raw, "://")
	s := raw
	if bare {
		s = "//" + raw
	}
	u, err := url.Parse(s)
	if err != nil {
		host := raw[strings.LastIndexByte(raw, '@')+1:]
		if i := strings.IndexAny(host, "/?#"); i >= 0 {
			host = host[:i]
		}
		return host + "/" + Mask
	}
	var b strings.Builder
	if !bare {
		b.WriteString(u.Scheme + "://")
	}
	if u.User != nil {
		b.WriteString(Mask + "@")
	}
	b.WriteString(u.Host)
	if hidePath && u.Path != "" && u.Path != "/" {
		b.WriteString("/" + Mask)
	} else {
		b.WriteString(u.EscapedPath())
	}
	if u.RawQuery != "" || u.ForceQuery {
		b.WriteString("?" + maskParams(u.RawQuery, "&"))
	}
	if u.Fragment != "" {
		b.WriteString("#" + Mask)
	}
	return b.String()
}

// maskParams masks each value of a sep-separated parameter list, keeping
// the names; a parameter without "=" could be a token itself, and is
// masked whole.
func maskParams(list, sep string) string {
	parts := strings.Split(list, sep)
	for i, kv := range parts {
		if k, _, ok := strings.Cut(kv, "="); ok {
			parts[i] = k + "=" + Mask
		} else if kv != "" {
			parts[i] = Mask
		}
	}
	return strings.Join(parts, sep)
}
