package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/internal/poll"
)

// heldByProcessTree reports whether the accepted TCP connection conn is
// held, at its other end, by process pid or one of its descendants. Any
// local process can connect to the supervisor's loopback ports (they are in
// the child's argv and /proc/net/tcp); only the task's own processes may
// get StartupDetails and the connections it asks for. Like Airflow's task
// SDK, it looks for the connecting socket among the sockets of the child's
// process tree, retrying for up to `wait` while the socket does not show in
// /proc yet (it may not the instant it is accepted). A socket that shows
// but is held outside the tree is refused at once: it was created before
// it connected, by a process that was then already outside the tree. Written against /proc directly rather
// than with a procfs library: this package is linked into every bundle,
// and such libraries' package inits would cost every task start.
func heldByProcessTree(conn net.Conn, pid int, wait time.Duration) (bool, string) {
	peer, ok1 := addrPort(conn.RemoteAddr())
	local, ok2 := addrPort(conn.LocalAddr())
	if !ok1 || !ok2 {
		return false, fmt.Sprintf("the connection's addresses (%v, %v) are not TCP", conn.RemoteAddr(), conn.LocalAddr())
	}
	var inode string
	err := poll.Until(context.Background(), wait, poll.Every(10*time.Millisecond), func() (bool, error) {
		var err error
		inode, err = socketInode(pid, peer, local)
		return inode != "", err
	})
	if errors.Is(err, poll.ErrTimeout) {
		return false, fmt.Sprintf("no socket from %s to %s in the task process's network namespace (pid %d) within %s", peer, local, pid, wait)
	}
	if err != nil {
		return false, err.Error()
	}
	target := "socket:[" + inode + "]"
	if holds(pid, target) {
		return true, ""
	}
	for _, p := range descendants(pid) {
		if holds(p, target) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("the socket from %s is held by no process of the task (pid %d and its descendants)", peer, pid)
}

func addrPort(a net.Addr) (netip.AddrPort, bool) {
	t, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, false
	}
	ap := t.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
}

// socketInode finds the inode of the socket whose local end is peer and
// remote end local, in /proc/<pid>/net/tcp and tcp6 (the tables of pid's
// network namespace); "" when there is none.
func socketInode(pid int, peer, local netip.AddrPort) (string, error) {
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			if os.IsNotExist(err) && table == "tcp6" {
				continue // a kernel without IPv6
			}
			return "", fmt.Errorf("reading the task process's sockets: %w", err)
		}
		inode := scanTCPTable(f, peer, local)
		f.Close()
		if inode != "" {
			return inode, nil
		}
	}
	return "", nil
}

// scanTCPTable reads a /proc/net/tcp{,6} table: a header line, then
// "sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...".
func scanTCPTable(f *os.File, peer, local netip.AddrPort) string {
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		l, ok1 := parseProcAddr(fields[1])
		r, ok2 := parseProcAddr(fields[2])
		if ok1 && ok2 && l == peer && r == local {
			return fields[9]
		}
	}
	return ""
}

// parseProcAddr decodes "0100007F:1F90": the address as 32-bit words in
// the kernel's byte order, the port big-endian; IPv4-mapped IPv6 is
// unmapped so it compares equal to the IPv4 the supervisor listens on.
func parseProcAddr(s string) (netip.AddrPort, bool) {
	hexAddr, hexPort, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, false
	}
	raw, err := hex.DecodeString(hexAddr)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, false
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	var b [16]byte
	for i := 0; i < len(raw); i += 4 {
		binary.BigEndian.PutUint32(b[i:], binary.NativeEndian.Uint32(raw[i:]))
	}
	var addr netip.Addr
	if len(raw) == 4 {
		addr = netip.AddrFrom4([4]byte(b[:4]))
	} else {
		addr = netip.AddrFrom16(b).Unmap()
	}
	return netip.AddrPortFrom(addr, uint16(port)), true
}

// holds reports whether process pid has a descriptor open on target. A
// process that exits, or whose descriptors we may not read, holds nothing.
func holds(pid int, target string) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if link, err := os.Readlink(dir + "/" + e.Name()); err == nil && link == target {
			return true
		}
	}
	return false
}

// descendants lists pid's descendants from every process's parent in
// /proc/<n>/stat.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parens.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], n)
		}
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; {
		p := queue[0]
		queue = queue[1:]
		out = append(out, p)
		queue = append(queue, children[p]...)
	}
	return out
}
