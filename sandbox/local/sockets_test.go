package local

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/waitwriter"
)

// pushEnv marks the copy of the test binary a sandbox runs to fill
// socket buffers: "<addr>,<connections>,<cap MiB>"; addr "loopback" for
// a server of its own on 127.0.0.1.
const pushEnv = "LOCAL_TEST_PUSH"

// pageSize is the unit of tcp_mem and /proc/net/sockstat.
var pageSize = int64(os.Getpagesize())

// tcpMemEnv carries the host's tcp_mem into a test's copy that runs in
// a network namespace of its own, where the host's sysctl is not shown.
const tcpMemEnv = "LOCAL_TEST_TCP_MEM"

// tcpMem is the host's tcp_mem: the low, pressure and high lines, in
// bytes.
func tcpMem(t *testing.T) [3]int64 {
	t.Helper()
	raw := []byte(os.Getenv(tcpMemEnv))
	if len(raw) == 0 {
		var err error
		if raw, err = os.ReadFile("/proc/sys/net/ipv4/tcp_mem"); err != nil {
			t.Fatal(err)
		}
	}
	var pages [3]int64
	if _, err := fmt.Sscan(string(raw), &pages[0], &pages[1], &pages[2]); err != nil {
		t.Fatalf("tcp_mem %q: %v", raw, err)
	}
	return [3]int64{pages[0] * pageSize, pages[1] * pageSize, pages[2] * pageSize}
}

// tcpMemUsed is the TCP memory of the whole host (sockstat's mem, the
// same counter in every network namespace), in bytes.
func tcpMemUsed(t *testing.T) int64 {
	t.Helper()
	raw, err := os.ReadFile("/proc/net/sockstat")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "TCP: "); ok {
			f := strings.Fields(rest)
			for i := 0; i+1 < len(f); i++ {
				if f[i] == "mem" {
					n, err := strconv.ParseInt(f[i+1], 10, 64)
					if err != nil {
						t.Fatal(err)
					}
					return n * pageSize
				}
			}
		}
	}
	t.Fatalf("no TCP mem in /proc/net/sockstat:\n%s", raw)
	return 0
}

// pushReport is what the push helper reported: whether it stopped
// (stalled: no socket took more) or reached its cap, and how much the
// kernel took from it.
type pushReport struct {
	stalled bool
	pushed  int64
	conns   int
}

// push runs the push helper in sb and returns its report while it still
// holds its sockets; release ends it.
func push(t *testing.T, d *Driver, sb *sandbox.Sandbox, addr string, conns, capMiB int) (rep pushReport, release func()) {
	t.Helper()
	copyTestBinary(t, d, sb)
	stdinR, stdinW := io.Pipe()
	out := waitwriter.New("push: ")
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(t.Context(), fmt.Sprintf("%s=%s,%d,%d ./local.test -test.run='^TestSocketPushHelper$' -test.v", pushEnv, addr, conns, capMiB),
			sandbox.ExecOptions{Timeout: 5 * time.Minute, Stdin: stdinR, Stdout: out, Stderr: out})
		done <- err
	}()
	var once sync.Once
	release = func() {
		once.Do(func() {
			stdinW.Close()
			if err := <-done; err != nil && !t.Failed() { // a failed test's context is gone
				t.Errorf("the push helper: %v", err)
			}
		})
	}
	t.Cleanup(release)
	select {
	case <-out.Seen():
	case err := <-done:
		t.Fatalf("the push helper ended before it reported: %v\n%s", err, out.String())
	}
	line := helperLine(out, "push: ")
	var how string
	if _, err := fmt.Sscanf(line, "%s %d bytes over %d connections", &how, &rep.pushed, &rep.conns); err != nil {
		t.Fatalf("unreadable push report %q: %v\n%s", line, err, out.String())
	}
	rep.stalled = how == "stalled"
	t.Logf("the sandbox: %s", line)
	return rep, release
}

// commandCgroups are the memory cgroups of d's running commands (net:
// those of their slirp4netns).
func commandCgroups(t *testing.T, d *Driver, net bool) []string {
	t.Helper()
	entries, err := os.ReadDir(d.memCgroup.memory)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), d.cgroupPrefix)
		if ok && e.IsDir() && strings.HasPrefix(rest, networkCgroup) == net {
			out = append(out, filepath.Join(d.memCgroup.memory, e.Name()))
		}
	}
	return out
}

// socketPeak is the most socket memory cgroup dir has held: cgroup v1's
// kmem.tcp high-water mark; v2 keeps none, so its socket memory now.
func socketPeak(t *testing.T, dir string) int64 {
	t.Helper()
	if raw, err := os.ReadFile(filepath.Join(dir, "memory.kmem.tcp.max_usage_in_bytes")); err == nil {
		n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	raw, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "sock "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// memoryPeak is the most memory cgroup dir has held (v1: without socket
// buffers; v2: with them).
func memoryPeak(t *testing.T, dir string) int64 {
	t.Helper()
	for _, f := range []string{"memory.max_usage_in_bytes", "memory.peak"} {
		if raw, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
			n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("%s has neither memory.max_usage_in_bytes nor memory.peak", dir)
	return 0
}

// cgroupMemory says how much memory cgroup dir has held and how often
// it ran out, for the log.
func cgroupMemory(dir string) string {
	var parts []string
	for _, f := range []string{"memory.max_usage_in_bytes", "memory.peak", "memory.failcnt"} {
		if raw, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
			parts = append(parts, f+" "+strings.TrimSpace(string(raw)))
		}
	}
	if raw, err := os.ReadFile(filepath.Join(dir, "memory.oom_control")); err == nil {
		parts = append(parts, strings.ReplaceAll(strings.TrimSpace(string(raw)), "\n", ", "))
	}
	return strings.Join(parts, "; ")
}

// checkBelowPressure fails the test unless the host's TCP memory is
// below tcp_mem's pressure line, and returns it.
func checkBelowPressure(t *testing.T, what string) int64 {
	t.Helper()
	used, lines := tcpMemUsed(t), tcpMem(t)
	if used >= lines[1] {
		t.Errorf("%s: the host's TCP memory is %d MiB, past tcp_mem's pressure line (%d MiB)", what, used>>20, lines[1]>>20)
	}
	return used
}

// safePush fails the test before it pushes capMiB if that could take
// the host's TCP memory past tcp_mem's low line (under which the kernel
// does not even begin to moderate sockets; pressure is the next line)
// whatever the sandbox does: the test must never push the host into
// pressure itself.
func safePush(t *testing.T, capMiB int) {
	t.Helper()
	used, lines := tcpMemUsed(t), tcpMem(t)
	if used+int64(capMiB)<<20 >= lines[0] {
		t.Fatalf("the host's TCP memory is %d MiB, tcp_mem's low line %d MiB: pushing %d MiB more could pass it, so the test does not run here now", used>>20, lines[0]>>20, capMiB)
	}
}

// Issue 38, item 4: a blocked sandbox with memory_mib 256 queued 290 MiB
// over its own loopback (100 connections to a server of its own that
// never reads) and was not stopped: on cgroup v1 socket buffers were not
// charged to its memory cgroup. They count now (kmem.tcp, set to
// memory_mib): the sandbox stops near its limit, far below the 256 MiB it
// may push, and the kernel's own count shows that the limit was what
// stopped it, not the helper giving up early.
func TestSocketBuffersCountAgainstTheSandbox(t *testing.T) {
	if !needRoot(t) {
		return
	}
	const limitMiB, capMiB = 32, 256
	safePush(t, capMiB)
	d := newTestDriver(t)
	if !d.memCgroup.socketsCounted() {
		t.Fatalf("this worker's memory cgroups (%v; %v) do not count socket buffers, so the test cannot show them counted", d.memCgroup, d.memErr)
	}
	sb := create(t, d, sandbox.Spec{MemoryMiB: limitMiB})
	before := tcpMemUsed(t)
	rep, release := push(t, d, sb, "loopback", 100, capMiB)
	held := checkBelowPressure(t, "while the sandbox holds its sockets")
	t.Logf("the host's TCP memory went from %d to %d MiB", before>>20, held>>20)
	if !rep.stalled {
		t.Fatalf("the sandbox pushed all %d MiB it tried (%d MiB) over its loopback with memory_mib %d: its socket buffers are not bounded", capMiB, rep.pushed>>20, limitMiB)
	}
	cgs := commandCgroups(t, d, false)
	if len(cgs) != 1 {
		t.Fatalf("want the command's one memory cgroup, found %v", cgs)
	}
	peak := socketPeak(t, cgs[0])
	t.Logf("the command's cgroup held at most %d MiB of socket buffers", peak>>20)
	if peak < limitMiB<<20*9/10 {
		t.Errorf("the sandbox stopped at %d MiB with its socket buffers at %d MiB, short of its %d MiB: something else stopped it, so the test shows nothing", rep.pushed>>20, peak>>20, limitMiB)
	}
	if slack := int64(8 << 20); rep.pushed > limitMiB<<20+slack {
		t.Errorf("the sandbox queued %d MiB over its loopback, past memory_mib %d", rep.pushed>>20, limitMiB)
	}
	release()
}

// Issue 38, item 4: 900 connections from an open-network sandbox to a
// server that accepts and never reads, 64 KiB writes, took the host's
// TCP memory past tcp_mem's pressure line; slirp4netns, whose host
// sockets carry the sandbox's traffic, was bounded by nothing. Now its
// memory and socket buffers have a cgroup of their own per command, and
// the sandbox's by memory_mib: the sandbox stops, at most about the two
// limits and slirp4netns's memory queued, far below what it may push (a
// cap that itself keeps the host far below pressure if nothing stops
// it), and the kernel's count shows one of slirp4netns's limits reached.
func TestOpenNetworkSocketBuffersAreBounded(t *testing.T) {
	if !needRoot(t) {
		return
	}
	if os.Getenv(ownNamespacesEnv) == "" {
		lines := tcpMem(t)
		t.Setenv(tcpMemEnv, fmt.Sprintf("%d %d %d", lines[0]/pageSize, lines[1]/pageSize, lines[2]/pageSize))
	}
	if !inPrivateNetwork(t) {
		return
	}
	// The server takes every connection and reads nothing; its receive
	// buffers (64 KiB asked, which the kernel doubles) are on this host
	// too, so they are kept small, yet large enough that its window lets
	// slirp4netns's sockets grow their send buffers, as a remote
	// server's would.
	const limitMiB, netMiB, capMiB, conns, serverBuf = 32, 32, 384, 900, 64 << 10
	serverMiB := conns * 2 * serverBuf >> 20
	safePush(t, capMiB+serverMiB)
	in := newInternet(t)
	lc := &net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, serverBuf) })
		return errors.Join(err, serr)
	}}
	server := hold(t, in.listenWith(t, in.public, lc))
	d, err := New(Options{Root: t.TempDir(), NetworkMemoryMiB: netMiB})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if !d.memCgroup.socketsCounted() {
		t.Fatalf("this worker's memory cgroups (%v; %v) do not count socket buffers, so the test cannot show them counted", d.memCgroup, d.memErr)
	}
	sb := create(t, d, sandbox.Spec{MemoryMiB: limitMiB, Network: sandbox.NetworkPolicy{Open: true}})
	before := tcpMemUsed(t)
	rep, release := push(t, d, sb, server.Addr().String(), conns, capMiB)
	held := checkBelowPressure(t, "while the sandbox holds its sockets")
	t.Logf("the server holds %d connections; the host's TCP memory went from %d to %d MiB", server.count(), before>>20, held>>20)
	if rep.conns != conns {
		t.Fatalf("the sandbox made %d of its %d connections", rep.conns, conns)
	}
	if !rep.stalled {
		t.Fatalf("the sandbox pushed all %d MiB it tried (%d MiB) to a server that reads nothing: nothing bounds the socket buffers of an open network", capMiB, rep.pushed>>20)
	}
	nets := commandCgroups(t, d, true)
	if len(nets) != 1 {
		t.Fatalf("want slirp4netns's one memory cgroup, found %v", nets)
	}
	// Either of its limits may be reached first: its socket buffers', or
	// its memory's (libslirp keeps a buffer per connection), which kills it.
	peak, memPeak := socketPeak(t, nets[0]), memoryPeak(t, nets[0])
	t.Logf("slirp4netns's cgroup held at most %d MiB of socket buffers and %d MiB of memory (%s)", peak>>20, memPeak>>20, cgroupMemory(nets[0]))
	if reached := int64(netMiB) << 20 * 9 / 10; peak < reached && memPeak < reached {
		t.Errorf("the sandbox stopped at %d MiB with slirp4netns's socket buffers at %d MiB and its memory at %d MiB, short of their %d MiB: something else stopped it, so the test shows nothing", rep.pushed>>20, peak>>20, memPeak>>20, netMiB)
	}
	if most := int64(limitMiB+2*netMiB+serverMiB+16) << 20; rep.pushed > most {
		t.Errorf("the sandbox queued %d MiB, more than its limit, slirp4netns's and the server's buffers (%d MiB)", rep.pushed>>20, most>>20)
	}
	release()
}

// holder accepts connections and keeps them open, reading nothing.
type holder struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func hold(t *testing.T, l net.Listener) *holder {
	h := &holder{Listener: l}
	t.Cleanup(func() {
		l.Close()
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, c := range h.conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.conns = append(h.conns, c)
			h.mu.Unlock()
		}
	}()
	return h
}

func (h *holder) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
}

// TestSocketPushHelper runs inside a sandbox (pushEnv): it opens its
// connections and writes 64 KiB at a time to whichever takes it, until
// it has pushed its cap or none takes more for 3 s, reports, and holds
// its sockets until its stdin ends.
func TestSocketPushHelper(t *testing.T) {
	spec := os.Getenv(pushEnv)
	if spec == "" {
		return
	}
	f := strings.Split(spec, ",")
	conns, _ := strconv.Atoi(f[1])
	capMiB, _ := strconv.Atoi(f[2])
	addr := f[0]
	if addr == "loopback" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = hold(t, l).Addr().String()
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	fds := make([]int, 0, conns)
	for range conns {
		fd, err := dialNonblocking(ap)
		if err != nil {
			break
		}
		fds = append(fds, fd)
	}
	pushed, stalled := pushUntilStopped(fds, int64(capMiB)<<20)
	how := "cap"
	if stalled {
		how = "stalled"
	}
	fmt.Printf("push: %s %d bytes over %d connections\n", how, pushed, len(fds))
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// dialNonblocking connects a TCP socket to ap, then makes it
// non-blocking.
func dialNonblocking(ap netip.AddrPort) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Connect(fd, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, unix.SetNonblock(fd, true)
}

// pushUntilStopped writes to fds until cap bytes are written (stalled
// false) or no socket takes more for 3 s (stalled true).
func pushUntilStopped(fds []int, cap int64) (pushed int64, stalled bool) {
	buf := make([]byte, 64<<10)
	for pushed < cap {
		progress := false
		for _, fd := range fds {
			if n, err := unix.Write(fd, buf); err == nil && n > 0 {
				pushed += int64(n)
				progress = true
			}
		}
		if progress {
			continue
		}
		poll := make([]unix.PollFd, len(fds))
		for i, fd := range fds {
			poll[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLOUT}
		}
		if n, err := unix.Poll(poll, 3000); n == 0 && err == nil {
			return pushed, true
		}
	}
	return pushed, false
}
