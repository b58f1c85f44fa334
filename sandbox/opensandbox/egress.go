package opensandbox

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	osdk "github.com/alibaba/OpenSandbox/sdks/sandbox/go"
)

// enforces reports whether got is a default-deny policy whose allowed
// targets are exactly hosts (case-insensitive, order ignored), and if not,
// why.
func enforces(got *osdk.PolicyStatusResponse, hosts []string) (bool, string) {
	switch got.Mode {
	case "deny_all", "enforcing":
	case "":
		return false, "the sidecar reported no enforcement mode"
	default:
		return false, fmt.Sprintf("the sidecar reports mode %s", got.Mode)
	}
	policy := osdk.NetworkPolicy{}
	if got.Policy != nil {
		policy = *got.Policy
	}
	// A missing defaultAction is deny on the sidecar.
	if da := strings.ToLower(policy.DefaultAction); da != "" && da != "deny" {
		return false, fmt.Sprintf("its default action is %q, not deny", policy.DefaultAction)
	}
	want := normalizedSet(hosts)
	var allowed []string
	for _, r := range policy.Egress {
		if strings.EqualFold(r.Action, "allow") {
			allowed = append(allowed, r.Target)
		}
	}
	have := normalizedSet(allowed)
	if strings.Join(have, ",") != strings.Join(want, ",") {
		return false, fmt.Sprintf("it allows [%s] instead of [%s]", strings.Join(have, ", "), strings.Join(want, ", "))
	}
	return true, ""
}

func normalizedSet(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		x = strings.ToLower(strings.TrimSpace(x))
		if x != "" && !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	sort.Strings(out)
	return out
}

// hostTargetProblem says why h is not a host name the egress sidecar can
// allow ("" when it is one): an exact name, or "*." and a name.
func hostTargetProblem(h string) string {
	name := strings.TrimPrefix(h, "*.")
	if _, err := netip.ParseAddr(name); err == nil {
		return "is an IP address: OpenSandbox enforces those only in dns+nft mode, which cannot be verified; allow host names instead"
	}
	if _, err := netip.ParsePrefix(name); err == nil {
		return "is an IP range: OpenSandbox enforces those only in dns+nft mode, which cannot be verified; allow host names instead"
	}
	if name == "" || strings.ContainsAny(name, "*/:@?# ") {
		return "is not a host name: give a name like pypi.org or *.example.com, without scheme, port, path or inner wildcards"
	}
	return ""
}
