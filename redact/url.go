package redact

import (
	"net/url"
	"strings"
)

// URL hides what a URL or host field may carry besides where it points:
// the whole userinfo (a user name can be a token too) and the value of
// every query parameter and of the fragment (signatures, tokens), keeping
// the parameter names. A value that does not parse keeps its host alone,
// since what cannot be read cannot be shown safe. Scheme-less values
// ("user:pw@host/path") are read as a network path.
func URL(raw string) string {
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
	b.WriteString(u.Host + u.EscapedPath())
	if u.RawQuery != "" {
		b.WriteByte('?')
		for i, kv := range strings.Split(u.RawQuery, "&") {
			if i > 0 {
				b.WriteByte('&')
			}
			k, _, _ := strings.Cut(kv, "=")
			b.WriteString(k + "=" + Mask)
		}
	}
	if u.Fragment != "" {
		b.WriteString("#" + Mask)
	}
	return b.String()
}
