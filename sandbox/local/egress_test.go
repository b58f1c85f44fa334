package local

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// workerLAN is the stand-in internet of network_test.go plus the worker's
// private network and a service of the worker's own: the worker has
// 198.18.0.1 (an ordinary address) and 10.77.0.1 on its side of the veth,
// its neighbour 10.77.0.2 a service on the private network, and the
// worker a server on 0.0.0.0, as Airflow's log server, Flower, a broker
// or a database bound to a wildcard are.
type workerLAN struct {
	in            *internet
	public, other *countingListener // 198.18.0.2, 203.0.113.2: the internet
	lan           *countingListener // 10.77.0.2: the worker's private network
	wild          *countingListener // the worker's 0.0.0.0
}

// workerAddrs are the worker's own addresses, the wildcard server's port.
func (w *workerLAN) workerAddrs() []net.Addr {
	port := w.wild.Addr().(*net.TCPAddr).Port
	return []net.Addr{&net.TCPAddr{IP: net.IPv4(198, 18, 0, 1), Port: port}, &net.TCPAddr{IP: net.IPv4(10, 77, 0, 1), Port: port}}
}

func newWorkerLAN(t *testing.T) *workerLAN {
	t.Helper()
	in := newInternet(t)
	sh := func(argv ...string) {
		t.Helper()
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}
	sh("ip", "addr", "add", "10.77.0.1/24", "dev", "afgw0")
	sh("ip", "addr", "add", "203.0.113.1/30", "dev", "afgw0")
	sh("nsenter", "--net="+in.ns, "ip", "addr", "add", "10.77.0.2/24", "dev", "inet0")
	sh("nsenter", "--net="+in.ns, "ip", "addr", "add", "203.0.113.2/30", "dev", "inet0")
	w := &workerLAN{in: in, public: in.listen(t, in.public), other: in.listen(t, "203.0.113.2"),
		lan: in.listen(t, "10.77.0.2"), wild: serve(t, mustListen(t, "0.0.0.0:0"))}
	// The worker reaches every one of them: what a sandbox cannot reach,
	// the filter keeps from it.
	for _, a := range append([]net.Addr{w.public.Addr(), w.other.Addr(), w.lan.Addr()}, w.workerAddrs()...) {
		c, err := net.DialTimeout("tcp", a.String(), 10*time.Second)
		if err != nil {
			t.Fatalf("the worker itself cannot reach %s, so the test proves nothing: %v", a, err)
		}
		c.Close()
	}
	return w
}

// expect probes addrs from sb and fails the test for each result that is
// not want's (connected or refused).
func expect(t *testing.T, what string, sb *sandbox.Sandbox, want map[net.Addr]string) {
	t.Helper()
	var addrs []net.Addr
	for a := range want {
		addrs = append(addrs, a)
	}
	got := probe(t, sb, addrs...)
	for i, a := range addrs {
		if got[i] != want[a] {
			t.Errorf("%s: %s is %s from the sandbox, want %s", what, a, got[i], want[a])
		}
	}
}

// Issue 29: an open-network sandbox reached a server on the worker's
// 0.0.0.0 by dialling the worker's own address (slirp4netns relays it
// through the worker's sockets, so it arrived over lo from the worker's
// own address), and the worker's private network. The internet stays in
// reach (the guard ran and the network works); neither of those does.
func TestOpenNetworkCannotReachWorker(t *testing.T) {
	if !needRoot(t) || !inPrivateNetwork(t) {
		return
	}
	w := newWorkerLAN(t)
	d := newTestDriver(t)
	open := create(t, d, sandbox.Spec{Network: sandbox.NetworkPolicy{Open: true}})
	mine := w.workerAddrs()
	expect(t, "open network", open, map[net.Addr]string{
		w.public.Addr(): "connected", w.other.Addr(): "connected",
		w.lan.Addr(): "refused", mine[0]: "refused", mine[1]: "refused",
	})
	if n := w.wild.accepted.Load(); n != 2 {
		t.Errorf("the worker's wildcard server accepted %d connections; want the worker's own 2", n)
	}
	if n := w.lan.accepted.Load(); n != 1 {
		t.Errorf("the private network's server accepted %d connections; want the worker's own 1", n)
	}
}

// The operator opens a private range (EgressAllowEnv): it becomes
// reachable, the worker's own address in it does not.
func TestEgressAllowOpensOperatorRanges(t *testing.T) {
	if !needRoot(t) || !inPrivateNetwork(t) {
		return
	}
	w := newWorkerLAN(t)
	t.Setenv(EgressAllowEnv, "10.77.0.0/16")
	d := newTestDriver(t)
	open := create(t, d, sandbox.Spec{Network: sandbox.NetworkPolicy{Open: true}})
	mine := w.workerAddrs()
	expect(t, "open network, 10.77.0.0/16 allowed", open, map[net.Addr]string{
		w.public.Addr(): "connected", w.lan.Addr(): "connected", mine[0]: "refused", mine[1]: "refused",
	})
}

// allow_cidrs narrow a blocked network to those CIDRs, and cannot widen
// what the operator allows: the worker's address and its private network
// stay out even when a spec lists them.
func TestAllowCIDRsNarrowABlockedNetwork(t *testing.T) {
	if !needRoot(t) || !inPrivateNetwork(t) {
		return
	}
	w := newWorkerLAN(t)
	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{Network: sandbox.NetworkPolicy{AllowCIDRs: []string{"198.18.0.0/30", "10.77.0.0/16"}}})
	mine := w.workerAddrs()
	expect(t, "blocked network with allow_cidrs", sb, map[net.Addr]string{
		w.public.Addr(): "connected", w.other.Addr(): "refused",
		w.lan.Addr(): "refused", mine[0]: "refused", mine[1]: "refused",
	})
	// With the operator's allowance, the spec's 10.77.0.0/16 passes.
	t.Setenv(EgressAllowEnv, "10.0.0.0/8")
	d2 := newTestDriver(t)
	sb2 := create(t, d2, sandbox.Spec{Network: sandbox.NetworkPolicy{AllowCIDRs: []string{"10.77.0.0/16"}}})
	expect(t, "blocked network with allow_cidrs, 10.0.0.0/8 allowed", sb2, map[net.Addr]string{
		w.lan.Addr(): "connected", w.public.Addr(): "refused", mine[1]: "refused",
	})
}

// tamperEnv marks the copy of the test binary a sandbox runs to remove
// its own filter.
const tamperEnv = "LOCAL_TEST_EGRESS_TAMPER"

// A sandbox's command cannot remove the filter: it has no capability in
// the user namespace owning its network. It tries through netlink (what
// nft flush ruleset sends), is refused, and the worker stays out of reach.
func TestEgressFilterHoldsAgainstTheSandbox(t *testing.T) {
	if !needRoot(t) || !inPrivateNetwork(t) {
		return
	}
	w := newWorkerLAN(t)
	d := newTestDriver(t)
	open := create(t, d, sandbox.Spec{Network: sandbox.NetworkPolicy{Open: true}})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	work, _, err := d.HostDirs(open.ID())
	if err != nil {
		t.Fatal(err)
	}
	if err := copyFile(self, filepath.Join(work, "local.test"), 0o755); err != nil {
		t.Fatal(err)
	}
	res, out, errs := run(t, open, tamperEnv+"=1 ./local.test -test.run='^TestEgressTamperHelper$' -test.v", time.Minute)
	if res.ExitCode != 0 || !strings.Contains(out, "tamper: ") {
		t.Fatalf("the tampering helper did not run in the sandbox: exit %d, %q %q", res.ExitCode, out, errs)
	}
	t.Logf("the sandbox's command: %s", strings.TrimSpace(out))
	if strings.Contains(out, "tamper: flushed") || !strings.Contains(out, "operation not permitted") {
		t.Errorf("a sandbox's command tried to flush its nftables ruleset: %s", out)
	}
	mine := w.workerAddrs()
	expect(t, "after the sandbox tried to remove its filter", open, map[net.Addr]string{
		w.public.Addr(): "connected", w.lan.Addr(): "refused", mine[0]: "refused",
	})
}

// TestEgressTamperHelper runs inside a sandbox (tamperEnv): it flushes
// the ruleset of its network namespace, as nft flush ruleset does.
func TestEgressTamperHelper(t *testing.T) {
	if os.Getenv(tamperEnv) == "" {
		return
	}
	c, err := nftables.New()
	if err == nil {
		c.FlushRuleset()
		err = c.Flush()
	}
	if err != nil {
		fmt.Printf("tamper: %v\n", err)
		return
	}
	fmt.Println("tamper: flushed")
}

// The same attack from an unprivileged worker's sandbox, whose filter
// nsenter installs as the worker's own user.
func TestOpenNetworkCannotReachWorkerAsUnprivilegedWorker(t *testing.T) {
	if os.Getenv(helperRootEnv) != "" || !needRoot(t) || !inPrivateNetwork(t) {
		return
	}
	w := newWorkerLAN(t)
	mine := w.workerAddrs()
	addrs := []string{w.public.Addr().String(), mine[0].String(), mine[1].String(), w.lan.Addr().String()}
	got, out := probeAsNobody(t, addrs)
	if got != "connected,refused,refused,refused" {
		t.Fatalf("from an unprivileged worker's open-network sandbox, %v: got %q, want connected,refused,refused,refused\n%s", addrs, got, out)
	}
}

// The worker's setting is checked when the driver starts.
func TestEgressSettings(t *testing.T) {
	t.Setenv(EgressAllowEnv, "10.0.0.0/8, 192.168.1.7 100.64.0.0/10")
	got, err := egressAllowFromEnv()
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32"), netip.MustParsePrefix("100.64.0.0/10")}
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: got %v %v, want %v", EgressAllowEnv, got, err, want)
	}
	for _, bad := range []string{"10.0.0.0/33", "fc00::/7", "mirror.internal"} {
		t.Setenv(EgressAllowEnv, bad)
		if _, err := New(Options{Root: t.TempDir()}); err == nil || !strings.Contains(err.Error(), EgressAllowEnv) {
			t.Errorf("%s=%s: want New to refuse it naming the setting, got %v", EgressAllowEnv, bad, err)
		}
	}
	t.Setenv(EgressAllowEnv, "")
	t.Setenv(EgressFilterEnv, "no")
	if _, err := New(Options{Root: t.TempDir()}); err == nil || !strings.Contains(err.Error(), EgressFilterEnv) {
		t.Errorf("%s=no: want New to refuse it, got %v", EgressFilterEnv, err)
	}
}

// Host allowlists stay refused, saying what to use instead; CIDR ones
// are offered where the filter can be installed.
func TestAllowHostsRefused(t *testing.T) {
	d := newTestDriver(t)
	_, err := sandbox.NewBackend(d).Create(t.Context(), sandbox.Spec{Network: sandbox.NetworkPolicy{AllowHosts: []string{"pypi.org"}}})
	if err == nil || !strings.Contains(err.Error(), "allow_cidrs") {
		t.Fatalf("want allow_hosts refused, pointing to allow_cidrs; got %v", err)
	}
	if !d.Capabilities().AllowCIDRs {
		t.Errorf("this host can install the egress filter (the tests above use it), yet allow_cidrs are not offered: %v", d.Capabilities().Hints)
	}
}

// Where the filter cannot be installed (no nftables in the kernel, an old
// bubblewrap), open networks and allow_cidrs are refused, saying why and
// what the operator can do; with EgressFilterEnv=off, open networks run
// without it.
func TestNoEgressFilterRefusesNetworks(t *testing.T) {
	d := newTestDriver(t)
	if err := d.egressSupport(); err != nil {
		t.Fatalf("this host cannot install the egress filter, so the test cannot tell a refusal from its cause: %v", err)
	}
	saved := egressReady.err
	egressReady.err = errors.New("nftables: not in this kernel (the test's stand-in)")
	t.Cleanup(func() { egressReady.err = saved })
	for _, net := range []sandbox.NetworkPolicy{{Open: true}, {AllowCIDRs: []string{"198.18.0.0/15"}}} {
		_, err := sandbox.NewBackend(d).Create(t.Context(), sandbox.Spec{Network: net})
		if !errors.Is(err, sandbox.ErrRefused) || !strings.Contains(fmt.Sprint(err), "not in this kernel") || !strings.Contains(fmt.Sprint(err), EgressFilterEnv) {
			t.Errorf("network %+v without the filter: want a refusal naming the reason and %s, got %v", net, EgressFilterEnv, err)
		}
	}
	t.Setenv(EgressFilterEnv, "off")
	off := newTestDriver(t)
	if c := off.Capabilities(); !c.OpenNetwork || c.AllowCIDRs {
		t.Errorf("%s=off: want open networks offered and allow_cidrs not, got open %v, allow_cidrs %v", EgressFilterEnv, c.OpenNetwork, c.AllowCIDRs)
	}
	sb := create(t, off, sandbox.Spec{Network: sandbox.NetworkPolicy{Open: true}})
	if res, out, errs := run(t, sb, "cat /proc/net/dev", time.Minute); res.ExitCode != 0 || !strings.Contains(out, "tap0") {
		t.Errorf("%s=off: the open network did not start: exit %d, %q %q", EgressFilterEnv, res.ExitCode, out, errs)
	}
}

// An install that fails at a command (the probe could not tell) fails
// that command before it runs: it never runs unfiltered, unless the
// operator set EgressFilterEnv=off.
func TestFailedEgressInstallStopsTheCommand(t *testing.T) {
	d := newTestDriver(t)
	if err := d.egressSupport(); err != nil {
		t.Fatalf("this host cannot install the egress filter, so the test cannot break it: %v", err)
	}
	saved := egressReady.nsenter
	egressReady.nsenter = "/nonexistent/nsenter"
	t.Cleanup(func() { egressReady.nsenter = saved })
	sb := create(t, d, sandbox.Spec{Network: sandbox.NetworkPolicy{Open: true}})
	_, err := sb.Exec(t.Context(), "touch ran", sandbox.ExecOptions{Timeout: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "egress filter") || !strings.Contains(err.Error(), EgressFilterEnv) {
		t.Errorf("want the command refused for want of its filter, naming %s; got %v", EgressFilterEnv, err)
	}
	work, _, err := d.HostDirs(sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(work, "ran")); err == nil {
		t.Errorf("the command ran without its egress filter")
	}
	t.Setenv(EgressFilterEnv, "off")
	off := newTestDriver(t)
	sbOff := create(t, off, sandbox.Spec{Network: sandbox.NetworkPolicy{Open: true}})
	if res, out, errs := run(t, sbOff, "touch ran && cat /proc/net/dev", time.Minute); res.ExitCode != 0 || !strings.Contains(out, "tap0") {
		t.Errorf("%s=off: the open network did not start: exit %d, %q %q", EgressFilterEnv, res.ExitCode, out, errs)
	}
}
