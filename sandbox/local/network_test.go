package local

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// countingListener accepts and closes connections, counting them.
type countingListener struct {
	net.Listener
	accepted atomic.Int32
}

func serve(t *testing.T, l net.Listener) *countingListener {
	t.Helper()
	c := &countingListener{Listener: l}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			c.accepted.Add(1)
			conn.Close()
		}
	}()
	return c
}

// ownNamespacesEnv marks the copy of a test that runs in namespaces of
// its own (inOwnNamespaces).
const ownNamespacesEnv = "LOCAL_TEST_OWN_NAMESPACES"

// inOwnNamespaces runs the calling test again in namespaces of its own,
// made by unshare with flags: what the test changes there (a network, its
// addresses, mounts) is fixed, and no copy of the test running beside it,
// nor anything else on the host, sees it or meets it. In that copy it
// reports true: the test goes on. In the calling test it runs the copy,
// fails if the copy did not pass, and reports false.
func inOwnNamespaces(t *testing.T, flags ...string) bool {
	t.Helper()
	if os.Getenv(ownNamespacesEnv) != "" {
		return true
	}
	needTools(t, "unshare")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command("unshare", slices.Concat(flags, []string{"--", self, "-test.run=^" + t.Name() + "$", "-test.count=1", "-test.v"})...)
	c.Env = append(os.Environ(), ownNamespacesEnv+"=1")
	out, err := c.CombinedOutput()
	t.Logf("in namespaces of its own (unshare %s):\n%s", strings.Join(flags, " "), out)
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()+" ") {
		t.Fatalf("%s failed in its namespaces: %v", t.Name(), err)
	}
	return false
}

// needTools fails the test unless every tool is installed.
func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("this test needs %s (iproute2, util-linux; scripts/ensure-tools.sh installs them): %v", tool, err)
		}
	}
}

// inPrivateNetwork runs the calling test in a network namespace of its
// own, as the worker's network (inOwnNamespaces), with loopback up.
func inPrivateNetwork(t *testing.T) bool {
	t.Helper()
	if !inOwnNamespaces(t, "--net") {
		return false
	}
	needTools(t, "ip", "nsenter")
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set lo up: %v\n%s", err, out)
	}
	return true
}

// internet is a network namespace the test creates, joined to the
// worker's by a veth pair: it stands in for the internet (an ordinary
// address) and for a link-local neighbour such as a metadata service. A
// process of its own holds it; it is never named under /run/netns, where
// anyone's ip netns could remove it. The worker's network is the test's
// own (inPrivateNetwork), so the names and addresses are fixed.
type internet struct {
	ns                string // its network namespace: /proc/<holder>/ns/net
	public, linkLocal string // addresses of the namespace's side
}

func newInternet(t *testing.T) *internet {
	t.Helper()
	if os.Getenv(ownNamespacesEnv) == "" {
		t.Fatal("newInternet changes the worker's network: call it in the test's own (inPrivateNetwork)")
	}
	// The holder says when its namespace exists, then sleeps until killed.
	holder := exec.Command("unshare", "--net", "--", "sh", "-c", "echo ready; exec sleep infinity")
	holder.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatalf("starting the stand-in internet's namespace: %v", err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("the stand-in internet's namespace did not start: %q %v", line, err)
	}
	in := &internet{ns: fmt.Sprintf("/proc/%d/ns/net", holder.Process.Pid), public: "198.18.0.2", linkLocal: "169.254.1.2"}
	run := func(argv ...string) {
		t.Helper()
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}
	ip := func(args ...string) { t.Helper(); run(append([]string{"ip"}, args...)...) }
	inetIP := func(args ...string) { t.Helper(); run(append([]string{"nsenter", "--net=" + in.ns, "ip"}, args...)...) }
	// 198.18.0.0/15 is for benchmarks, never routed; the link-local
	// address is on the link, as a metadata service is.
	ip("link", "add", "afgw0", "type", "veth", "peer", "name", "inet0", "netns", strconv.Itoa(holder.Process.Pid))
	ip("addr", "add", "198.18.0.1/30", "dev", "afgw0")
	ip("addr", "add", "169.254.1.1/30", "dev", "afgw0")
	ip("link", "set", "afgw0", "up")
	inetIP("addr", "add", in.public+"/30", "dev", "inet0")
	inetIP("addr", "add", in.linkLocal+"/30", "dev", "inet0")
	inetIP("link", "set", "inet0", "up")
	inetIP("link", "set", "lo", "up")
	return in
}

// listen opens a listener on addr inside the namespace: the socket is made
// by a thread moved into it, and stays there when the thread moves back.
// The thread must not exit there instead: a child started from it with a
// parent-death signal (the driver's bwrap, the namespace's holder) would
// be killed with it.
func (in *internet) listen(t *testing.T, addr string) *countingListener {
	t.Helper()
	return serve(t, in.listenWith(t, addr, &net.ListenConfig{}))
}

// listenWith is listen with lc's options, returning the bare listener.
func (in *internet) listenWith(t *testing.T, addr string, lc *net.ListenConfig) net.Listener {
	t.Helper()
	type result struct {
		l   net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		back, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		defer back.Close()
		target, err := os.Open(in.ns)
		if err == nil {
			err = unix.Setns(int(target.Fd()), unix.CLONE_NEWNET)
			target.Close()
		}
		var l net.Listener
		if err == nil {
			l, err = lc.Listen(context.Background(), "tcp", net.JoinHostPort(addr, "0"))
			if berr := unix.Setns(int(back.Fd()), unix.CLONE_NEWNET); berr != nil {
				// Stuck in the other namespace: the thread exits with us.
				ch <- result{l, berr}
				return
			}
		}
		runtime.UnlockOSThread()
		ch <- result{l, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("listening on %s in the stand-in internet: %v", addr, r.err)
	}
	t.Cleanup(func() { r.l.Close() })
	return r.l
}

// probe tries TCP connections from the sandbox, all at once (a link-local
// address without a neighbour takes seconds to fail): "connected" or
// "refused" for each address.
func probe(t *testing.T, sb *sandbox.Sandbox, addrs ...net.Addr) []string {
	t.Helper()
	var script strings.Builder
	for i, addr := range addrs {
		a := addr.(*net.TCPAddr)
		fmt.Fprintf(&script, "(timeout 20 bash -c 'exec 3<>/dev/tcp/%s/%d' 2>/dev/null && echo connected || echo refused) > /tmp/probe%d &\n", a.IP, a.Port, i)
	}
	script.WriteString("wait\n")
	for i := range addrs {
		fmt.Fprintf(&script, "cat /tmp/probe%d\n", i)
	}
	res, out, errs := run(t, sb, script.String(), time.Minute)
	got := strings.Fields(out)
	if res.ExitCode != 0 || len(got) != len(addrs) {
		t.Fatalf("probe of %v: exit %d, %q %q", addrs, res.ExitCode, out, errs)
	}
	return got
}

// Issue 19, hole 2: an open-network sandbox shared the worker's network
// namespace and reached a server on the worker's 127.0.0.1 (on a Celery
// worker, the broker; elsewhere a database, other tasks' supervisor ports)
// and the cloud metadata service at 169.254.169.254. Now it has a network
// of its own: it reaches the stand-in internet, never the worker's
// loopback or a link-local address, while the worker reaches all three.
func TestOpenNetworkIsPrivate(t *testing.T) {
	if !needRoot(t) || !inPrivateNetwork(t) { // namespaces and veth pairs need root
		return
	}
	in := newInternet(t)
	loopback := serve(t, mustListen(t, "127.0.0.1:0"))
	public := in.listen(t, in.public)
	linkLocal := in.listen(t, in.linkLocal)
	for _, l := range []*countingListener{loopback, public, linkLocal} {
		c, err := net.DialTimeout("tcp", l.Addr().String(), 10*time.Second)
		if err != nil {
			t.Fatalf("the worker itself cannot reach %s, so the test proves nothing: %v", l.Addr(), err)
		}
		c.Close()
	}

	d := newTestDriver(t)
	open := create(t, d, sandbox.Spec{Network: sandbox.NetworkPolicy{Open: true}})
	metadata := &net.TCPAddr{IP: net.IPv4(169, 254, 169, 254), Port: 80}
	got := probe(t, open, public.Addr(), loopback.Addr(), linkLocal.Addr(), metadata)
	if got[0] != "connected" {
		t.Fatalf("an open-network sandbox could not reach the stand-in internet at %s: %s", public.Addr(), got[0])
	}
	for i, addr := range []net.Addr{loopback.Addr(), linkLocal.Addr(), metadata} {
		if got[i+1] != "refused" {
			t.Errorf("an open-network sandbox reached the worker's %s", addr)
		}
	}
	_, resolv, _ := run(t, open, "cat /etc/resolv.conf", time.Minute)
	if !strings.Contains(resolv, "nameserver "+sandboxDNS) || strings.Count(resolv, "nameserver") != 1 {
		t.Errorf("the sandbox's resolv.conf should name slirp4netns's DNS relay alone:\n%s", resolv)
	}

	blocked := create(t, d, sandbox.Spec{})
	if got := probe(t, blocked, public.Addr()); got[0] != "refused" {
		t.Errorf("a blocked sandbox reached the stand-in internet")
	}
	// What each server saw: the worker's own dial, and the open sandbox's
	// one connection to the internet; nothing else.
	if l, p, ll := loopback.accepted.Load(), public.accepted.Load(), linkLocal.accepted.Load(); l != 1 || p != 2 || ll != 1 {
		t.Errorf("connections accepted: loopback %d (want 1), internet %d (want 2), link-local %d (want 1)", l, p, ll)
	}
}

// The same under an unprivileged worker, where slirp4netns joins the
// sandbox's namespaces as the worker's own user.
func TestOpenNetworkIsPrivateAsUnprivilegedWorker(t *testing.T) {
	if os.Getenv(helperRootEnv) != "" || !needRoot(t) || !inPrivateNetwork(t) {
		return
	}
	in := newInternet(t)
	loopback := serve(t, mustListen(t, "127.0.0.1:0"))
	public := in.listen(t, in.public)
	linkLocal := in.listen(t, in.linkLocal)
	addrs := []string{public.Addr().String(), loopback.Addr().String(), linkLocal.Addr().String()}
	got, out := probeAsNobody(t, addrs)
	if got != "connected,refused,refused" {
		t.Fatalf("from an unprivileged worker's open-network sandbox, %v: got %q, want connected,refused,refused\n%s", addrs, got, out)
	}
	if l, p, ll := loopback.accepted.Load(), public.accepted.Load(), linkLocal.accepted.Load(); l != 0 || p != 1 || ll != 0 {
		t.Errorf("connections accepted: loopback %d (want 0), internet %d (want 1), link-local %d (want 0)", l, p, ll)
	}
}

// probeEnv carries the addresses the unprivileged helper probes.
const probeEnv = "LOCAL_TEST_PROBE"

// TestUnprivilegedNetworkHelper is the unprivileged worker of the test
// above; run on its own it has nothing to do.
func TestUnprivilegedNetworkHelper(t *testing.T) {
	root := os.Getenv(helperRootEnv)
	if root == "" || os.Getenv(probeEnv) == "" {
		return
	}
	d, err := New(Options{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var addrs []net.Addr
	for _, a := range strings.Split(os.Getenv(probeEnv), ",") {
		ta, err := net.ResolveTCPAddr("tcp", a)
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, ta)
	}
	open := create(t, d, sandbox.Spec{Network: sandbox.NetworkPolicy{Open: true}})
	fmt.Printf("probe=%s\n", strings.Join(probe(t, open, addrs...), ","))
}

func mustListen(t *testing.T, addr string) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Without slirp4netns an open network is refused, never the worker's.
func TestOpenNetworkWithoutSlirpIsRefused(t *testing.T) {
	d, err := New(Options{Root: t.TempDir(), Slirp4netns: "/nonexistent/slirp4netns"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, err = sandbox.NewBackend(d).Create(t.Context(), sandbox.Spec{Network: sandbox.NetworkPolicy{Open: true}})
	if !strings.Contains(fmt.Sprint(err), "apt-get install slirp4netns") {
		t.Fatalf("want a refusal saying how to install slirp4netns, got %v", err)
	}
	create(t, d, sandbox.Spec{}) // a blocked network needs nothing
}

// slirp4netns --enable-sandbox (a root worker's) unmounted host mounts it
// never made: it makes only / private in its mount namespace before it
// unmounts the host's tree there, so the unmount of each mount below a
// shared one reached the host. ip netns makes /run/netns such a mount:
// every open-network command took every named network namespace of the
// host (other CI jobs', a container runtime's) off /run/netns. slirp4netns
// now starts in a mount namespace of its own whose mounts are all private.
func TestOpenNetworkLeavesHostMountsAlone(t *testing.T) {
	// Mounting needs root, and so does --enable-sandbox. The mounts are
	// made in a mount namespace of the test's own: the worker's.
	if !needRoot(t) || !inOwnNamespaces(t, "--mount", "--propagation", "private") {
		return
	}
	// A shared mount with one below it, as /run/netns and its entries.
	base := t.TempDir()
	entry := filepath.Join(base, "entry")
	mount := func(target, data string) {
		t.Helper()
		if err := unix.Mount("afgw-test", target, "tmpfs", 0, data); err != nil {
			t.Fatalf("mounting a tmpfs at %s: %v", target, err)
		}
		t.Cleanup(func() { unix.Unmount(target, unix.MNT_DETACH) })
	}
	mount(base, "size=64k")
	if err := unix.Mount("", base, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(entry, 0o755); err != nil {
		t.Fatal(err)
	}
	mount(entry, "size=4k")
	if !mounted(t, entry) {
		t.Fatalf("%s is not mounted, so the test proves nothing", entry)
	}

	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{Network: sandbox.NetworkPolicy{Open: true}})
	// tap0 is slirp4netns's interface: it ran.
	if res, out, errs := run(t, sb, "cat /proc/net/dev", time.Minute); res.ExitCode != 0 || !strings.Contains(out, "tap0") {
		t.Fatalf("the open-network command did not get slirp4netns's tap0: exit %d, %q %q", res.ExitCode, out, errs)
	}
	d.Close() // slirp4netns has exited: what it unmounted, it has
	if !mounted(t, entry) {
		t.Fatalf("an open-network command unmounted the worker's %s, below a shared mount", entry)
	}
}

// mounted reports whether path is a mount point in this mount namespace.
func mounted(t *testing.T, path string) bool {
	t.Helper()
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(info), "\n") {
		if f := strings.Fields(line); len(f) > 4 && unescapeMount(f[4]) == path {
			return true
		}
	}
	return false
}

// probeAsNobody has TestUnprivilegedNetworkHelper, run as nobody, dial
// addrs from an open-network sandbox; got is what it printed after
// probe=, out all it printed. slirp4netns makes the sandbox's interface
// with /dev/net/tun, which Debian leaves open to every user (0666); some
// hosts (this test's CI among them) make it root's only. The helper gets
// Debian's.
func probeAsNobody(t *testing.T, addrs []string) (got, out string) {
	t.Helper()
	tun := `mknod -m 0666 "$BASE/tun" c 10 200 && mount --bind "$BASE/tun" /dev/net/tun`
	out = runAsNobody(t, "TestUnprivilegedNetworkHelper", []string{probeEnv + "=" + strings.Join(addrs, ",")}, tun)
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "probe="); ok {
			got = v
		}
	}
	return got, out
}
