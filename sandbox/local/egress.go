package local

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/internal/tailbuf"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// The egress filter. slirp4netns relays a sandbox's connections through
// the worker's own sockets, so the address a sandbox dials is the one the
// worker dials: a server on the worker's 0.0.0.0 answered a sandbox that
// dialled the worker's own address (over lo, from the worker's own
// address, which firewalls and pg_hba's samehost trust), and the worker's
// private network (RFC 1918, 100.64.0.0/10) was in reach. Before a
// command starts, an nftables output filter goes into the sandbox's
// network namespace: it rejects every address of the worker (each
// interface's, read when the network starts) and the private, shared,
// loopback, link-local, multicast and reserved ranges (blockedRanges),
// less the ranges the operator allows (EgressAllowEnv); the worker's own
// addresses stay out whatever is allowed. A blocked network with
// allow_cidrs gets the same network, and the filter then lets through only
// the spec's CIDRs (still less what is rejected above: a spec cannot widen
// the operator's setting). IPv6 never leaves the sandbox (slirp4netns
// gives it none; the filter drops it too).
//
// The namespace belongs to the user namespace bwrap made, in which the
// worker is uid 0 (bwrap 0.8+ with --disable-userns maps it so; the
// sandbox's processes live in a user namespace nested below it, with every
// capability dropped, so they cannot change the rules). A Go process
// cannot join a user namespace (it is multithreaded), so nsenter(1) joins
// both and executes the worker's own binary there, which installs the
// rules through netlink (egress_nft.go) and exits.

// EgressAllowEnv is the operator's list of blocked ranges a sandbox may
// reach after all: CIDRs separated by commas or spaces, such as a private
// package mirror's 10.20.0.0/16. The worker's own addresses stay
// unreachable. A Dag cannot widen it: a spec's allow_cidrs only narrow.
const EgressAllowEnv = "AIRFLOW_GO_WORKER_LOCAL_EGRESS_ALLOW"

// EgressFilterEnv is the operator's switch for a worker that cannot
// install the egress filter (a kernel without nftables, bubblewrap older
// than 0.8, no nsenter): "off" gives open networks without it, with a
// warning, where the worker would otherwise refuse them. Where the filter
// can be installed it always is.
const EgressFilterEnv = "AIRFLOW_GO_WORKER_LOCAL_EGRESS_FILTER"

// blockedRanges are unreachable from a sandbox unless the operator
// allows them: this host's and its neighbours' networks, never the
// internet's.
// (A function, so no table is built at every task's start.)
func blockedRanges() []netip.Prefix {
	return []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/8"),      // "this host": 0.0.0.0 is the worker itself
		netip.MustParsePrefix("10.0.0.0/8"),     // RFC 1918
		netip.MustParsePrefix("100.64.0.0/10"),  // shared address space (carrier NAT, Tailscale)
		netip.MustParsePrefix("127.0.0.0/8"),    // the worker's loopback
		netip.MustParsePrefix("169.254.0.0/16"), // link-local: metadata services (slirp's DNS relay excepted)
		netip.MustParsePrefix("172.16.0.0/12"),  // RFC 1918
		netip.MustParsePrefix("192.168.0.0/16"), // RFC 1918
		netip.MustParsePrefix("224.0.0.0/4"),    // multicast
		netip.MustParsePrefix("240.0.0.0/4"),    // reserved, and the broadcast address
	}
}

// egressPlan is what the filter enforces in one sandbox's namespace: what
// the egress child reads on its stdin.
type egressPlan struct {
	// Worker are the worker's own addresses: always rejected.
	Worker []netip.Prefix `json:"worker"`
	// Blocked are rejected unless in Allowed.
	Blocked []netip.Prefix `json:"blocked"`
	Allowed []netip.Prefix `json:"allowed"`
	// Only, when set, is a blocked network's allow_cidrs: nothing else
	// passes (nor slirp's DNS relay: no host allowlist is offered).
	Only []netip.Prefix `json:"only,omitempty"`
	// OnlySet says Only applies (an empty Only would pass nothing).
	OnlySet bool `json:"only_set,omitempty"`
	// DNS is slirp4netns's relay, let through for an open network.
	DNS netip.Addr `json:"dns"`
	// AddWorker: add Worker to the installed filter's worker set, and
	// nothing else (addrwatch.go).
	AddWorker bool `json:"add_worker,omitempty"`
}

// parseCIDRs reads a list of CIDRs (or bare addresses) separated by
// commas or spaces.
func parseCIDRs(v string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				return nil, fmt.Errorf("%q is not a CIDR such as 10.20.0.0/16 (%v)", f, err)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if !p.Addr().Is4() {
			return nil, fmt.Errorf("%q is not an IPv4 range: a local sandbox has no IPv6", f)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// egressAllowFromEnv reads EgressAllowEnv.
func egressAllowFromEnv() ([]netip.Prefix, error) {
	allow, err := parseCIDRs(os.Getenv(EgressAllowEnv))
	if err != nil {
		return nil, fmt.Errorf("%s: %v; list the blocked ranges local sandboxes may reach, separated by commas", EgressAllowEnv, err)
	}
	return allow, nil
}

// egressFilterOff reads EgressFilterEnv.
func egressFilterOff() (bool, error) {
	return offSwitch(EgressFilterEnv, "allow open networks without the egress filter where it cannot be installed")
}

// needsNetwork: the sandbox gets slirp4netns's network (an open one, or a
// blocked one with allow_cidrs).
func (d *Driver) needsNetwork(spec driver.Spec) bool {
	net := spec.NetworkPolicy()
	return !d.shareNet && (net.Open || len(net.AllowCIDRs) > 0)
}

// planFor is the filter of a sandbox with this spec, with the worker's
// addresses as they are now.
func (d *Driver) planFor(spec driver.Spec) (egressPlan, error) {
	worker, err := workerAddresses()
	if err != nil {
		return egressPlan{}, err
	}
	p := egressPlan{Worker: worker, Blocked: blockedRanges(), Allowed: d.egressAllow, DNS: netip.MustParseAddr(sandboxDNS)}
	if net := spec.NetworkPolicy(); !net.Open {
		p.OnlySet = true
		if p.Only, err = parseCIDRs(strings.Join(net.AllowCIDRs, ",")); err != nil {
			return egressPlan{}, fmt.Errorf("network.allow_cidrs: %v", err)
		}
	}
	return p, nil
}

// workerAddresses are the IPv4 addresses of every interface of the
// worker's network namespace.
func workerAddresses() ([]netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("cannot list the worker's addresses, which a sandbox must not reach: %v", err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap().Is4() {
			out = append(out, netip.PrefixFrom(ip.Unmap(), 32))
		}
	}
	return out, nil
}

// egressReady caches whether this host can install the filter: the
// answer does not change while the worker runs.
var egressReady struct {
	once    sync.Once
	nsenter string
	err     error
}

// egressSupport says why the filter cannot be installed here, or nil.
func (d *Driver) egressSupport() error {
	if !d.disableUserns {
		return errors.New("bubblewrap is older than 0.8 (no --disable-userns): the sandbox's processes would live in the user namespace that owns their network, where an unprivileged worker is not uid 0 to install the filter; upgrade bubblewrap")
	}
	egressReady.once.Do(func() {
		egressReady.nsenter, egressReady.err = exec.LookPath("nsenter")
		if egressReady.err != nil {
			egressReady.err = fmt.Errorf("nsenter (util-linux) is not installed (%v); install util-linux", egressReady.err)
			return
		}
		if err := probeEgress(); errors.Is(err, errChildNotStarted) {
			// Not a verdict on nftables: this worker may not make user
			// namespaces of its own (AppArmor lets bwrap alone, on
			// Ubuntu 24.04), yet nsenter can join bwrap's. Each
			// command's install is the guard: it fails closed.
			d.log.Debug("cannot probe the egress filter in a namespace of its own; each open network's command installs it or does not run", "error", err)
		} else {
			egressReady.err = err
		}
	})
	return egressReady.err
}

// noEgressFilter says why a sandbox's network cannot be filtered here.
func noEgressFilter(why error) string {
	return fmt.Sprintf("the local backend filters a sandbox's network with nftables, so that it cannot reach the worker's own addresses or private network, and cannot install that filter here (%v); use block: true, or have the operator set %s=off to allow open networks without it", why, EgressFilterEnv)
}

// probeEgress installs a filter in a user and network namespace of its
// own, as each sandbox's is: a kernel without nftables (or one refusing
// it in user namespaces) fails here, not at a sandbox's first command.
func probeEgress() error {
	plan := egressPlan{Worker: []netip.Prefix{netip.MustParsePrefix("192.0.2.1/32")}, Blocked: blockedRanges(),
		Allowed: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}, Only: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
		OnlySet: true, DNS: netip.MustParseAddr(sandboxDNS)}
	cmd := exec.Command("/proc/self/exe", egressChildArg)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	return runEgressChild(cmd, plan)
}

// installEgress installs the filter in the sandbox's network namespace
// (owned by userns) before its command starts, as: the owner of userns
// (the sandbox's ids, or zero ids for the worker).
func (d *Driver) installEgress(netns, userns *os.File, plan egressPlan, as ids) error {
	if err := d.runEgressInstaller(netns, userns, plan, as); err != nil {
		return fmt.Errorf("cannot install the sandbox's egress filter, which keeps it off the worker's own addresses and private network, so its command does not run (%v); use block: true, or have the operator set %s=off to allow open networks without it", err, EgressFilterEnv)
	}
	return nil
}

// runEgressInstaller runs the egress child with plan in the sandbox's
// network namespace (owned by userns), as its owner.
func (d *Driver) runEgressInstaller(netns, userns *os.File, plan egressPlan, as ids) error {
	exe, err := os.Open("/proc/self/exe")
	if err != nil {
		return fmt.Errorf("cannot open the worker's own binary to install the sandbox's egress filter: %v", err)
	}
	defer exe.Close()
	// nsenter joins the user namespace first (its owner runs it), then
	// the network, and executes our binary. It keeps its uid, which is
	// uid 0 there (bwrap, or userns.go, maps it so), so the binary has
	// every capability in it. (Without --preserve-credentials nsenter
	// calls setgroups, which those namespaces deny.) A root worker's
	// sandbox's namespace is the sandbox uid's: root executing there
	// would be unmapped, and have none.
	cmd := exec.Command(egressReady.nsenter, "--user=/proc/self/fd/3", "--net=/proc/self/fd/4", "--preserve-credentials", "--", "/proc/self/fd/5", egressChildArg)
	cmd.ExtraFiles = []*os.File{userns, netns, exe}
	cmd.SysProcAttr = as.procAttr()
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	return runEgressChild(cmd, plan)
}

// egressChildTimeout bounds one install; it takes milliseconds.
const egressChildTimeout = 30 * time.Second

// errChildNotStarted: the egress child could not even start.
var errChildNotStarted = errors.New("cannot start the egress filter's installer")

// runEgressChild runs the egress child cmd with plan on its stdin.
func runEgressChild(cmd *exec.Cmd, plan egressPlan) error {
	in, err := json.Marshal(plan)
	if err != nil {
		return err
	}
	out := tailbuf.New(2048)
	cmd.Env = []string{egressChildEnv + "=1"}
	cmd.Stdin = bytes.NewReader(in)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = time.Second
	keepFdsFromChildren()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%w: %v", errChildNotStarted, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(egressChildTimeout):
		cmd.Process.Kill()
		err = fmt.Errorf("not done after %s", egressChildTimeout)
		<-done //nolint:errcheck // drained: err says it timed out
	}
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}
