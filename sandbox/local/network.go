package local

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airflow-sandbox/airflow-go-worker/internal/poll"
	"github.com/airflow-sandbox/airflow-go-worker/internal/tailbuf"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// An open network (block: false) is a network namespace of the sandbox's
// own, connected to the outside by slirp4netns (user-mode networking: it
// relays the sandbox's connections through ordinary sockets of its own on
// the host). Sharing the worker's network namespace gave every open
// sandbox the worker's loopback services (a Celery broker, a database,
// other tasks' supervisor ports) and the cloud metadata service at
// 169.254.169.254 with the worker's credentials.
//
// Why slirp4netns and not pasta (both in Debian): the sandbox's network is
// 169.254.0.0/16 itself, so every link-local address, the metadata
// service's included, is on the sandbox's own link, where slirp answers
// ARP only for its gateway and DNS addresses and refuses to relay anything
// else of that network (with --disable-host-loopback, which also keeps the
// gateway from reaching the worker's 127.0.0.1). Nothing has to be filtered
// and no route set with privileges the worker may not have. pasta
// (Debian 12's, 2023-03) answers ARP for every address and has no
// address blocklist, so link-local addresses stayed reachable through it
// without a route that only a process with CAP_NET_ADMIN in the sandbox's
// namespace could add; run as root it also needs --runas 0, and it
// forwards the worker's loopback ports into the namespace unless -T/-U
// none. slirp4netns runs with --enable-seccomp (a syscall filter), since
// libslirp parses the sandbox's packets, and on a root worker also with
// --enable-sandbox (its own mount namespace, every capability dropped but
// binding low ports), started in a mount namespace whose mounts are all
// private, so it cannot unmount the host's; on an unprivileged worker it runs as the worker's
// user without that. IPv4 only: IPv6 is not enabled, so no IPv6 address
// (a metadata service's fd00:ec2::254 either) is reachable.
const (
	sandboxCIDR = "169.254.0.0/16"
	sandboxDNS  = "169.254.0.3" // slirp4netns's DNS relay: network + 3
	// networkReadyTimeout bounds slirp4netns's set-up; it takes
	// milliseconds, so this only catches one that hangs.
	networkReadyTimeout = 30 * time.Second
)

// sandboxNetwork is the network of one command: slirp4netns, joined to
// the command's network namespace, and the watch that keeps its egress
// filter's worker addresses current (addrwatch.go).
type sandboxNetwork struct {
	netns, userns *os.File // the command's, held while it runs
	slirp         *slirpProc
	watch         *addrWatch    // nil: no filter to keep current
	followed      chan struct{} // closed once the watch's follower returned
	kill          func()        // stops the command
	failed        atomic.Pointer[error]
}

// startNetwork connects the network namespace of bwrap's init (host pid)
// to the outside, its egress filter installed first, and returns once the
// sandbox's interface is configured (as: who owns the sandbox's user
// namespace, usernsArgs; kill stops the command, should its filter fail
// to follow the worker's addresses). Its stop ends slirp4netns (which
// also exits by itself when the worker dies: its --exit-fd closes).
func (d *Driver) startNetwork(pid int, spec driver.Spec, as ids, kill func()) (*sandboxNetwork, error) {
	if err := waitLoopback(pid); err != nil {
		return nil, err
	}
	if err := waitIDMaps(pid, nil); err != nil {
		return nil, err
	}
	netns, userns, err := namespacesOf(pid)
	if err != nil {
		return nil, err
	}
	n := &sandboxNetwork{netns: netns, userns: userns, kill: kill}
	// Before slirp4netns connects the namespace: no packet leaves it
	// unfiltered.
	if err := d.filterNetwork(n, spec, as); err != nil {
		n.stop()
		return nil, err
	}
	if n.slirp, err = d.startSlirp(netns, userns); err != nil {
		n.stop()
		return nil, err
	}
	return n, nil
}

// stop ends the command's network.
func (n *sandboxNetwork) stop() {
	if n.watch != nil {
		n.watch.close()
		<-n.followed
	}
	if n.slirp != nil {
		n.slirp.stop()
	}
	n.netns.Close()
	n.userns.Close()
}

// fail stops the command whose filter could not follow the worker.
func (n *sandboxNetwork) fail(err error) {
	n.failed.Store(&err)
	n.kill()
}

// filterNetwork installs the egress filter in n's namespace, and starts
// keeping it current, or says why the command may not run without it.
func (d *Driver) filterNetwork(n *sandboxNetwork, spec driver.Spec, as ids) error {
	// unfiltered says whether the operator lets this sandbox run without
	// the filter, which cannot be installed (why); otherwise it fails.
	unfiltered := func(why error) bool {
		if !d.egressOff || !spec.NetworkPolicy().Open {
			return false
		}
		d.log.Warn("an open-network sandbox runs without the egress filter ("+EgressFilterEnv+"=off): it can reach the worker's own addresses and private network", "reason", why)
		return true
	}
	if filter := d.egressSupport(); filter != nil {
		if unfiltered(filter) {
			return nil
		}
		return errors.New(noEgressFilter(filter))
	}
	// Subscribed before the addresses are listed: none added in between
	// is missed.
	watch, err := watchAddresses()
	var plan egressPlan
	if err == nil {
		plan, err = d.planFor(spec)
	}
	if err == nil {
		err = d.installEgress(n.netns, n.userns, plan, as)
	}
	if err != nil {
		if watch != nil {
			watch.close()
		}
		if unfiltered(err) {
			return nil
		}
		return err
	}
	n.watch, n.followed = watch, make(chan struct{})
	go func() {
		defer close(n.followed)
		d.followAddresses(watch, n.netns, n.userns, as, plan.Worker, n.fail)
	}()
	return nil
}

// slirpProc is a running slirp4netns.
type slirpProc struct {
	d       *Driver
	cmd     *exec.Cmd
	exitW   *os.File      // closing it tells slirp4netns to exit
	exited  chan struct{} // closed once it has
	release func() error  // removes its cgroup once it has exited
	stopped atomic.Bool   // stop was called
}

// startSlirp starts slirp4netns on netns (owned by userns), bounded
// (limitNetworkHelper), and returns once the interface is configured.
func (d *Driver) startSlirp(netns, userns *os.File) (*slirpProc, error) {
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer readyR.Close()
	exitR, exitW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		return nil, err
	}
	diag := tailbuf.New(2048)
	args := []string{"--configure", "--mtu=65520", "--disable-host-loopback", "--cidr=" + sandboxCIDR,
		"--enable-seccomp", "--ready-fd=3", "--exit-fd=4",
		"--userns-path=/proc/self/fd/5", "--netns-type=path", "/proc/self/fd/6", "tap0"}
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() == 0 {
		// Its own mount namespace and no capability but binding low ports.
		// Unprivileged, slirp4netns would first become uid 0 of the
		// sandbox's user namespace, which maps only the worker's uid.
		args = append([]string{"--enable-sandbox"}, args...)
		// That sandbox makes only / private before it unmounts the host's
		// tree in its namespace, so the unmount of every mount below a
		// shared one (ip netns's /run/netns entries) reached the host. It
		// starts in a mount namespace of ours instead, where Go has made
		// every mount private.
		attr.Unshareflags = syscall.CLONE_NEWNS
	}
	cmd := exec.Command(d.slirp, args...)
	cmd.Env = []string{}
	cmd.Stdout, cmd.Stderr = diag, diag
	cmd.ExtraFiles = []*os.File{readyW, exitR, userns, netns}
	cmd.SysProcAttr = attr
	cmd.WaitDelay = time.Second
	keepFdsFromChildren()
	err = cmd.Start()
	readyW.Close()
	exitR.Close()
	if err != nil {
		exitW.Close()
		return nil, fmt.Errorf("cannot start %s for the sandbox's network: %v", d.slirp, err)
	}
	p := &slirpProc{d: d, cmd: cmd, exitW: exitW, exited: make(chan struct{}), release: noRelease}
	go func() { _ = cmd.Wait(); close(p.exited) }() // its diagnostics are in diag
	if p.release, err = d.limitNetworkHelper(cmd.Process.Pid); err == nil {
		err = waitReady(readyR)
	}
	if err != nil {
		p.stop()
		out := strings.TrimSpace(diag.String())
		advice := ""
		if strings.Contains(out, "/dev/net/tun") {
			advice = "; it makes the sandbox's interface with /dev/net/tun, which the worker's user must be able to open (Debian's mode is 0666; in a container, pass the device: docker run --device /dev/net/tun)"
		}
		return nil, fmt.Errorf("slirp4netns could not give the sandbox its network (%v): %s%s", err, out, advice)
	}
	return p, nil
}

// waitReady waits for slirp4netns's ready fd.
func waitReady(readyR *os.File) error {
	ready := make(chan error, 1)
	go func() {
		b, err := io.ReadAll(readyR) // "1", then closed; EOF alone: it failed
		if err == nil && !bytes.HasPrefix(b, []byte("1")) {
			err = errors.New("it exited before the network was ready")
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		return err
	case <-time.After(networkReadyTimeout):
		return fmt.Errorf("not ready after %s", networkReadyTimeout)
	}
}

// stop ends slirp4netns and removes its cgroup.
func (p *slirpProc) stop() {
	p.stopped.Store(true)
	p.exitW.Close()
	select {
	case <-p.exited:
	case <-time.After(2 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
	if err := p.release(); err != nil {
		p.d.log.Warn("slirp4netns's cgroup could not be removed; a later worker start removes it", "error", err)
	}
}

// lost says why the network ended while the command ran, "" if it did
// not: its filter could not follow the worker, or slirp4netns exited
// before stop (killed, SIGKILL, is what its memory limit does when it is
// reached).
func (n *sandboxNetwork) lost() string {
	if n == nil {
		return "" // the command had no network of its own
	}
	if err := n.failed.Load(); err != nil {
		return "network: " + (*err).Error()
	}
	p := n.slirp
	select {
	case <-p.exited:
	default:
		return ""
	}
	if p.stopped.Load() {
		return ""
	}
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		return fmt.Sprintf("network: the sandbox lost its network during the command: slirp4netns, which carries it, was killed, as it is when it reaches its memory limit (%d MiB, socket buffers included: many connections, or servers that read slowly, fill it); use fewer connections at once, or have the operator raise %s", p.d.networkMemMiB, NetworkMemoryEnv)
	}
	return fmt.Sprintf("network: the sandbox lost its network during the command: slirp4netns, which carries it, exited (%v)", p.cmd.ProcessState)
}

// waitLoopback waits until bwrap has given the sandbox's loopback its
// address: bwrap adds it exclusively and fails if slirp4netns brought lo
// up first (which adds it). The namespace's routing table, empty until
// then, shows it; bwrap gets there within a millisecond or so, so the
// checks start 50 µs apart (this is on every open sandbox's creation) and
// double up to 5 ms.
func waitLoopback(pid int) error {
	fibTrie := fmt.Sprintf("/proc/%d/net/fib_trie", pid)
	err := poll.Until(context.Background(), networkReadyTimeout, poll.Doubling(50*time.Microsecond, 5*time.Millisecond), func() (bool, error) {
		fib, err := os.ReadFile(fibTrie)
		if err != nil {
			return false, fmt.Errorf("the sandbox ended while its network was set up: %v", err)
		}
		return len(fib) > 0, nil
	})
	if errors.Is(err, poll.ErrTimeout) {
		return fmt.Errorf("bubblewrap did not set up the sandbox's loopback within %s", networkReadyTimeout)
	}
	return err
}

// waitIDMaps waits until the user namespace of bwrap's init (host pid)
// has its uid and gid maps. bwrap's init brings its loopback up before it
// writes them, so a namespace whose loopback is up may have none yet, and
// under load (issue 40: a busy 2-core machine) the egress filter's
// installer joined it then: a process that joins a user namespace keeps
// its capabilities only until it executes a program, which then gets them
// back only if its uid is mapped there (to root). Without a map the
// installer ran with none, and nftables refused its netlink batch with
// "operation not permitted". The gid map is written last (uid map,
// setgroups, gid map), so it stands for both. waiting, when set (by
// tests), runs each time a look finds no map yet.
func waitIDMaps(pid int, waiting func()) error {
	gidMap := fmt.Sprintf("/proc/%d/gid_map", pid)
	err := poll.Until(context.Background(), networkReadyTimeout, poll.Doubling(50*time.Microsecond, 5*time.Millisecond), func() (bool, error) {
		m, err := os.ReadFile(gidMap)
		if err != nil {
			return false, fmt.Errorf("the sandbox ended while its network was set up: %v", err)
		}
		if len(bytes.TrimSpace(m)) > 0 {
			return true, nil
		}
		if waiting != nil {
			waiting()
		}
		return false, nil
	})
	if errors.Is(err, poll.ErrTimeout) {
		return fmt.Errorf("bubblewrap did not map the sandbox's user namespace within %s", networkReadyTimeout)
	}
	return err
}

// namespacesOf opens the network namespace of process pid and the user
// namespace that owns it. bwrap's --disable-userns puts the sandbox's
// processes in a user namespace nested below the one owning the network
// namespace, where slirp4netns would lack the right to join the network.
func namespacesOf(pid int) (netns, userns *os.File, err error) {
	netns, err = os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return nil, nil, fmt.Errorf("cannot open the sandbox's network namespace: %v", err)
	}
	fd, err := unix.IoctlRetInt(int(netns.Fd()), unix.NS_GET_USERNS)
	if err != nil {
		netns.Close()
		return nil, nil, fmt.Errorf("cannot find the user namespace owning the sandbox's network namespace: %v", err)
	}
	return netns, os.NewFile(uintptr(fd), "userns"), nil
}

// sandboxResolvConf is /etc/resolv.conf in an open-network sandbox: the
// host's search and options lines, with slirp4netns's DNS relay as the
// only nameserver (the host's may be on its loopback, which the sandbox
// cannot reach).
func sandboxResolvConf(host []byte) []byte {
	var b bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(host))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && (f[0] == "search" || f[0] == "domain" || f[0] == "options") {
			b.WriteString(strings.Join(f, " ") + "\n")
		}
	}
	b.WriteString("nameserver " + sandboxDNS + "\n")
	return b.Bytes()
}

// noNetworkHelper says why an open network cannot be given here.
func noNetworkHelper(why error) string {
	return fmt.Sprintf("an open network needs slirp4netns, which gives the sandbox a network of its own instead of the worker's, whose loopback services and cloud metadata address a sandbox must not reach (%v); install it (Debian/Ubuntu: apt-get install slirp4netns) or use block: true", why)
}
