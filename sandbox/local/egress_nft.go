package local

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The egress child: the worker's own binary, executed by nsenter inside a
// sandbox's user and network namespaces (egress.go), recognised here by
// its argument and environment together, before main runs. It reads an
// egressPlan on stdin, installs it, and exits.
const (
	egressChildArg = "__airflow_go_worker_egress_filter__"
	egressChildEnv = "AIRFLOW_GO_WORKER_EGRESS_CHILD"
)

func init() {
	if len(os.Args) == 2 && os.Args[1] == egressChildArg && os.Getenv(egressChildEnv) == "1" {
		var plan egressPlan
		err := json.NewDecoder(os.Stdin).Decode(&plan)
		switch {
		case err != nil:
		case plan.AddWorker:
			err = addWorkerAddresses(plan.Worker)
		default:
			err = installPlan(plan)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// egressTable holds the filter in the sandbox's namespace; workerSet,
// in it, the worker's addresses, to which addresses the worker gains
// while a command runs are added (addrwatch.go).
const (
	egressTable = "airflow_go_worker_egress"
	workerSet   = "worker"
)

// workerAddrSet is the set of the worker's addresses in table t.
func workerAddrSet(t *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: t, Name: workerSet, KeyType: nftables.TypeIPAddr}
}

// addrElements are the set elements of the addresses of prefixes (each
// a /32).
func addrElements(prefixes []netip.Prefix) []nftables.SetElement {
	var out []nftables.SetElement
	for _, p := range prefixes {
		a := p.Addr().As4()
		out = append(out, nftables.SetElement{Key: a[:]})
	}
	return out
}

// addWorkerAddresses adds addresses to the filter's worker set in this
// process's network namespace, where installPlan made it.
func addWorkerAddresses(addrs []netip.Prefix) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("cannot open netlink to nftables: %v", err)
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: egressTable}
	if err := c.SetAddElements(workerAddrSet(t), addrElements(addrs)); err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables refused the worker's new addresses: %v", err)
	}
	return nil
}

// installPlan installs plan in this process's network namespace, in one
// netlink transaction: all of it or none. The output chain:
//
//	oif lo: accept (the sandbox's own loopback)
//	not IPv4: drop
//	slirp's DNS relay: accept (open networks only)
//	a worker address (the worker set): reject
//	each allowed range: goto allowed
//	each blocked range: reject
//	goto allowed
//
// and allowed: accept (open), or each of a blocked network's CIDRs
// accept, then reject.
func installPlan(plan egressPlan) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("cannot open netlink to nftables: %v", err)
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: egressTable})
	worker := workerAddrSet(t)
	if err := c.AddSet(worker, addrElements(plan.Worker)); err != nil {
		return fmt.Errorf("cannot build the worker's address set: %v", err)
	}
	allowed := c.AddChain(&nftables.Chain{Name: "allowed", Table: t})
	accept := nftables.ChainPolicyAccept
	out := c.AddChain(&nftables.Chain{Name: "output", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	rule := func(ch *nftables.Chain, exprs ...expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs})
	}
	acceptV := &expr.Verdict{Kind: expr.VerdictAccept}
	gotoAllowed := &expr.Verdict{Kind: expr.VerdictGoto, Chain: allowed.Name}
	// An ICMP error reaches the sandbox's socket at once: connect fails
	// rather than hanging until its timeout.
	reject := &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}

	lo := make([]byte, unix.IFNAMSIZ)
	copy(lo, "lo")
	rule(out, &expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: lo}, acceptV)
	rule(out, &expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}}, &expr.Verdict{Kind: expr.VerdictDrop})
	if !plan.OnlySet && plan.DNS.Is4() {
		rule(out, append(daddrIn(netip.PrefixFrom(plan.DNS, 32)), acceptV)...)
	}
	rule(out, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: worker.Name, SetID: worker.ID}, reject)
	for _, p := range plan.Allowed {
		rule(out, append(daddrIn(p), gotoAllowed)...)
	}
	for _, p := range plan.Blocked {
		rule(out, append(daddrIn(p), reject)...)
	}
	rule(out, gotoAllowed)
	if !plan.OnlySet {
		rule(allowed, acceptV)
	} else {
		for _, p := range plan.Only {
			rule(allowed, append(daddrIn(p), acceptV)...)
		}
		rule(allowed, reject)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables refused the sandbox's egress filter: %v", err)
	}
	return nil
}

// daddrIn matches IPv4 packets whose destination lies in p.
func daddrIn(p netip.Prefix) []expr.Any {
	p = p.Masked()
	addr := p.Addr().As4()
	load := &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4}
	eq := &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr[:]}
	if p.Bits() == 32 {
		return []expr.Any{load, eq}
	}
	m := uint32(0xffffffff) << (32 - p.Bits()) // 0 for /0
	maskBytes := []byte{byte(m >> 24), byte(m >> 16), byte(m >> 8), byte(m)}
	return []expr.Any{load, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: maskBytes, Xor: make([]byte, 4)}, eq}
}
