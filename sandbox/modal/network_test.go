package modal

import (
	"testing"
	"time"
)

func TestWholeSecondsRoundsUp(t *testing.T) {
	for in, want := range map[time.Duration]time.Duration{
		0: time.Second, 300 * time.Millisecond: time.Second, time.Second: time.Second,
		1001 * time.Millisecond: 2 * time.Second, 90 * time.Second: 90 * time.Second,
	} {
		if got := wholeSeconds(in); got != want {
			t.Errorf("wholeSeconds(%v) = %v, want %v", in, got, want)
		}
	}
}

func TestCanonicalCIDR(t *testing.T) {
	ok := map[string]string{"10.0.0.0/8": "10.0.0.0/8", "192.0.2.1": "192.0.2.1/32", "192.0.2.1/32": "192.0.2.1/32"}
	for in, want := range ok {
		if got, err := canonicalCIDR(in); err != nil || got != want {
			t.Errorf("%q -> %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"10.0.0.1/8", "0.0.0.0/0", "example.com", "http://10.0.0.0/8", "::1", "10.0.0.0/33", "010.0.0.0/8", " 10.0.0.0/8", ""} {
		if got, err := canonicalCIDR(bad); err == nil {
			t.Errorf("%q accepted as %q", bad, got)
		}
	}
}

func TestCanonicalHost(t *testing.T) {
	ok := map[string]string{"Example.COM": "example.com", "*.pypi.org": "*.pypi.org", "a-b.c.io": "a-b.c.io"}
	for in, want := range ok {
		if got, err := canonicalHost(in); err != nil || got != want {
			t.Errorf("%q -> %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"localhost", "*.com", "*.*.a.com", "a.*.com", "https://a.com", "a.com:443", "a.com/x", "-a.com", "a..com", "1.2.3.4", "", "user@a.com"} {
		if got, err := canonicalHost(bad); err == nil {
			t.Errorf("%q accepted as %q", bad, got)
		}
	}
}
