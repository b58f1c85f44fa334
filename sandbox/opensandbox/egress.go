package opensandbox

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"sort"
	"strings"
)

// EgressAuthHeader is the header the egress sidecar's endpoint may require;
// the endpoint lookup returns it with its value.
const EgressAuthHeader = "OPENSANDBOX-EGRESS-AUTH"

// EgressPolicy is the egress sidecar's GET /policy answer.
type EgressPolicy struct {
	Status          string            `json:"status"`
	Mode            string            `json:"mode"` // allow_all | deny_all | enforcing
	EnforcementMode string            `json:"enforcementMode"`
	Policy          NetworkPolicySpec `json:"policy"`
}

// EgressClient reads the policy the egress sidecar is enforcing.
type EgressClient struct {
	base    string
	headers map[string]string
	hc      *http.Client
}

// NewEgressClient returns a client for the sidecar endpoint baseURL.
func NewEgressClient(baseURL string, headers map[string]string, hc *http.Client) *EgressClient {
	return &EgressClient{base: strings.TrimSuffix(baseURL, "/"), headers: headers, hc: hc}
}

// Policy reads the enforced policy.
func (c *EgressClient) Policy(ctx context.Context) (EgressPolicy, error) {
	const op = "read the egress policy"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/policy", nil)
	if err != nil {
		return EgressPolicy{}, fmt.Errorf("OpenSandbox could not %s: %v", op, err)
	}
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return EgressPolicy{}, transportError(op, err)
	}
	var out EgressPolicy
	err = decode(resp, op, &out)
	return out, err
}

// enforces reports whether got is a default-deny policy whose allowed
// targets are exactly hosts (case-insensitive, order ignored), and if not,
// why.
func enforces(got EgressPolicy, hosts []string) (bool, string) {
	switch got.Mode {
	case "deny_all", "enforcing":
	case "":
		return false, "the sidecar reported no enforcement mode"
	default:
		return false, fmt.Sprintf("the sidecar reports mode %s", got.Mode)
	}
	// A missing defaultAction is deny on the sidecar.
	if da := strings.ToLower(got.Policy.DefaultAction); da != "" && da != "deny" {
		return false, fmt.Sprintf("its default action is %q, not deny", got.Policy.DefaultAction)
	}
	want := normalizedSet(hosts)
	var allowed []string
	for _, r := range got.Policy.Egress {
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
