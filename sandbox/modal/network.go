package modal

import (
	"fmt"
	"net/netip"
	"strings"

	modal "github.com/modal-labs/modal-client/go"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// Egress enforcement modes, as the Python provider names them.
const (
	// EgressStrict enforces only what Modal enforces at the IP level: no
	// network, or an IPv4 CIDR allowlist. Hostname allowlists are refused.
	EgressStrict = "strict"
	// EgressSNI also accepts hostname allowlists, which Modal enforces by
	// the TLS SNI name; port 443 is then open to any address that presents
	// an allowed name.
	EgressSNI = "sni"
)

// egress is the network part of a create call.
type egress struct {
	block   bool
	cidrs   *modal.Allowlist
	domains *modal.Allowlist
	warning string // logged, not fatal
}

// mapNetwork turns the portable policy into Modal parameters, refusing
// (terminally, before any RPC) whatever Modal cannot enforce.
func mapNetwork(p driver.NetworkPolicy, enforcement string) (egress, error) {
	if p.Open {
		if len(p.AllowHosts) > 0 || len(p.AllowCIDRs) > 0 {
			return egress{}, driver.Refused("network: allow lists only narrow a blocked network; set block: true, or drop the lists for an open network")
		}
		return egress{}, nil // open network: Modal's default
	}
	if len(p.AllowHosts) == 0 && len(p.AllowCIDRs) == 0 {
		return egress{block: true}, nil
	}
	var out egress
	if len(p.AllowCIDRs) > 0 {
		cidrs := make([]string, 0, len(p.AllowCIDRs))
		for _, c := range p.AllowCIDRs {
			canon, err := canonicalCIDR(c)
			if err != nil {
				return egress{}, driver.Refused("network: allow_cidrs entry %q: %v", c, err)
			}
			cidrs = append(cidrs, canon)
		}
		out.cidrs = &modal.Allowlist{Entries: cidrs}
	}
	if len(p.AllowHosts) > 0 {
		if enforcement != EgressSNI {
			return egress{}, driver.Refused("network: allow_hosts %q cannot be enforced with egress_enforcement %q: Modal can only allow hostnames by TLS SNI; configure the modal backend with egress_enforcement: sni, or allow the hosts' IPv4 ranges with allow_cidrs", p.AllowHosts, enforcement)
		}
		hosts := make([]string, 0, len(p.AllowHosts))
		for _, h := range p.AllowHosts {
			canon, err := canonicalHost(h)
			if err != nil {
				return egress{}, driver.Refused("network: allow_hosts entry %q: %v", h, err)
			}
			hosts = append(hosts, canon)
		}
		out.domains = &modal.Allowlist{Entries: hosts}
		if out.cidrs != nil {
			out.warning = "allow_hosts with egress_enforcement sni opens port 443 to every address that presents an allowed name, in addition to allow_cidrs"
		}
	}
	return out, nil
}

// canonicalCIDR accepts an IPv4 address (as /32) or an IPv4 prefix without
// host bits, and never the whole internet.
func canonicalCIDR(s string) (string, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil || !p.Addr().Is4() {
			return "", fmt.Errorf("not an IPv4 CIDR such as 10.1.0.0/16 (hostnames and URLs belong in allow_hosts; IPv6 is not supported)")
		}
		if p.Masked() != p {
			return "", fmt.Errorf("has host bits set; did you mean %s?", p.Masked())
		}
		if p.Bits() == 0 {
			return "", fmt.Errorf("allows the whole internet; use block: false for an open network")
		}
		return p.String(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return "", fmt.Errorf("not an IPv4 address or CIDR such as 10.1.0.0/16 (hostnames and URLs belong in allow_hosts; IPv6 is not supported)")
	}
	return netip.PrefixFrom(a, 32).String(), nil
}

// canonicalHost accepts a bare DNS name of two or more labels, optionally
// with one leading "*." label, and lower-cases it.
func canonicalHost(s string) (string, error) {
	h := strings.ToLower(s)
	rest := strings.TrimPrefix(h, "*.")
	if strings.ContainsAny(rest, "*/:@?# ") {
		return "", fmt.Errorf("not a bare hostname: give a name like api.example.com or *.example.com, without scheme, port, path or inner wildcards")
	}
	if len(rest) > 253 {
		return "", fmt.Errorf("longer than 253 characters")
	}
	labels := strings.Split(rest, ".")
	if len(labels) < 2 {
		return "", fmt.Errorf("single-label names are not allowed; give a fully qualified name like api.example.com")
	}
	for _, l := range labels {
		if !validLabel(l) {
			return "", fmt.Errorf("label %q is not a valid DNS label (letters, digits and inner hyphens, 1-63 characters)", l)
		}
	}
	if tld := labels[len(labels)-1]; strings.Trim(tld, "0123456789") == "" {
		return "", fmt.Errorf("looks like an IP address; put addresses in allow_cidrs")
	}
	return h, nil
}

func validLabel(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for _, r := range l {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}
