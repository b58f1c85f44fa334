// Command egress stands in for OpenSandbox's egress sidecar where the real
// one is not at hand (`make opensandbox-e2e` without
// OPENSANDBOX_EGRESS_BIN): opensandbox-server runs it as the sidecar
// container whose network namespace the sandbox shares, with
// CAP_NET_ADMIN, the policy in OPENSANDBOX_EGRESS_RULES, the enforcement
// mode in OPENSANDBOX_EGRESS_MODE and the API token in
// OPENSANDBOX_EGRESS_TOKEN. Like the real sidecar it enforces the policy in
// that namespace with nftables, and answers GET /policy and GET /healthz on
// port 18080 behind the OPENSANDBOX-EGRESS-AUTH header.
//
// What it enforces, per mode (the real sidecar's semantics, without its
// DNS proxy: there is no upstream resolver where it runs):
//
//   - dns+nft: a policy that denies by default rejects every packet the
//     sandbox sends but to its loopback, replies to connections made to it
//     (its published ports), and the allowed addresses and ranges; allowed
//     host names are reported back and reach nothing. A policy that allows
//     by default rejects only the denied addresses and ranges.
//   - dns: names are filtered, addresses are not: DNS (port 53) is
//     rejected, every other packet goes out, as with the real sidecar in
//     that mode, where a sandbox reaches any literal address.
package main

import (
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/netip"
	"os"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Environment the server gives the sidecar, and its port.
const (
	rulesEnv   = "OPENSANDBOX_EGRESS_RULES"
	modeEnv    = "OPENSANDBOX_EGRESS_MODE"
	tokenEnv   = "OPENSANDBOX_EGRESS_TOKEN"
	authHeader = "OPENSANDBOX-EGRESS-AUTH"
	listenAddr = ":18080"
	tableName  = "opensandbox_egress_standin"
)

// policy is the server's networkPolicy, as it passes it on.
type policy struct {
	DefaultAction string `json:"defaultAction,omitempty"`
	Egress        []rule `json:"egress"`
}

type rule struct {
	Action string `json:"action"`
	Target string `json:"target"`
}

func main() {
	log.SetFlags(log.LstdFlags | log.LUTC)
	pol, mode, err := readConfig()
	if err == nil {
		err = enforce(pol, mode)
	}
	if err != nil {
		log.Fatalf("egress stand-in: %v", err)
	}
	log.Printf("egress stand-in: enforcing %s in mode %s", describe(pol), mode)
	log.Fatal(http.ListenAndServe(listenAddr, handler(pol, mode, os.Getenv(tokenEnv))))
}

func readConfig() (policy, string, error) {
	var pol policy
	raw := os.Getenv(rulesEnv)
	if raw == "" {
		return pol, "", fmt.Errorf("%s is empty: the server starts the sidecar only with a policy", rulesEnv)
	}
	if err := json.Unmarshal([]byte(raw), &pol); err != nil {
		return pol, "", fmt.Errorf("%s is not a network policy: %v", rulesEnv, err)
	}
	if pol.DefaultAction == "" {
		pol.DefaultAction = "deny" // the sidecar's reading of a missing default
	}
	mode := os.Getenv(modeEnv)
	switch mode {
	case "":
		mode = "dns"
	case "dns", "dns+nft":
	default:
		return pol, "", fmt.Errorf("%s=%q is not dns or dns+nft", modeEnv, mode)
	}
	return pol, mode, nil
}

func describe(p policy) string {
	b, _ := json.Marshal(p)
	return string(b)
}

// status is GET /policy's mode: deny_all, enforcing or allow_all.
func status(p policy) string {
	switch {
	case p.DefaultAction == "deny" && len(p.Egress) == 0:
		return "deny_all"
	case p.DefaultAction == "allow" && len(p.Egress) == 0:
		return "allow_all"
	}
	return "enforcing"
}

func handler(p policy, mode, token string) http.Handler {
	mux := http.NewServeMux()
	authed := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if token != "" && r.Header.Get(authHeader) != token {
				writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "unauthorized"})
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("GET /healthz", authed(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}))
	mux.HandleFunc("GET /policy", authed(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "mode": status(p), "enforcementMode": mode, "policy": p})
	}))
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// enforce installs the policy in this network namespace, in one netlink
// transaction. The output chain:
//
//	oif lo: accept
//	ct state established,related: accept (answers to the published ports)
//	dns:     dport 53: reject; accept
//	dns+nft: deny by default:  each allowed address: accept; reject
//	         allow by default: each denied address: reject; accept
func enforce(p policy, mode string) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("cannot open netlink to nftables (the sidecar needs CAP_NET_ADMIN): %v", err)
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: tableName})
	accept := nftables.ChainPolicyAccept
	out := c.AddChain(&nftables.Chain{Name: "output", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	add := func(exprs ...expr.Any) { c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: exprs}) }
	acceptV := &expr.Verdict{Kind: expr.VerdictAccept}
	reject := &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}

	lo := make([]byte, unix.IFNAMSIZ)
	copy(lo, "lo")
	add(&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: lo}, acceptV)
	add(established(acceptV)...)
	switch {
	case mode == "dns":
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			add(dport(proto, 53, reject)...)
		}
	case p.DefaultAction == "deny":
		for _, pfx := range addressTargets(p, "allow") {
			add(daddrIn(pfx, acceptV)...)
		}
		add(reject)
	default:
		for _, pfx := range addressTargets(p, "deny") {
			add(daddrIn(pfx, reject)...)
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables refused the policy: %v", err)
	}
	return nil
}

// established matches packets of connections already made (ct state
// established or related).
func established(v expr.Any) []expr.Any {
	mask := uint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED)
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: le32(mask), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		v,
	}
}

func le32(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }

// dport matches packets of protocol proto to port.
func dport(proto byte, port uint16, v expr.Any) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{byte(port >> 8), byte(port)}},
		v,
	}
}

// addressTargets are the rules' targets with action that are addresses or
// ranges; host names are left out (see the package comment).
func addressTargets(p policy, action string) []netip.Prefix {
	var out []netip.Prefix
	for _, r := range p.Egress {
		if !strings.EqualFold(r.Action, action) {
			continue
		}
		if a, err := netip.ParseAddr(r.Target); err == nil {
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		} else if pfx, err := netip.ParsePrefix(r.Target); err == nil {
			out = append(out, pfx.Masked())
		}
	}
	return out
}

// daddrIn matches packets whose destination lies in pfx (IPv4 or IPv6).
func daddrIn(pfx netip.Prefix, v expr.Any) []expr.Any {
	proto, offset := byte(unix.NFPROTO_IPV4), uint32(16)
	if pfx.Addr().Is6() {
		proto, offset = unix.NFPROTO_IPV6, 24
	}
	addr := pfx.Addr().AsSlice()
	mask := make([]byte, len(addr))
	for i := range pfx.Bits() {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: uint32(len(addr))},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: uint32(len(addr)), Mask: mask, Xor: make([]byte, len(addr))},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr},
		v,
	}
}
