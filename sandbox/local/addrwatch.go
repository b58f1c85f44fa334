package local

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// The egress filter rejects the worker's own addresses, listed when a
// command's network starts. An address the worker gains while a command
// runs (a new interface, DHCP, a VPN coming up) was reachable from the
// sandbox until its next command (issue 38). Each open-network command
// now follows the worker's addresses: a netlink socket subscribed to
// IPv4 address changes, opened before the addresses are listed (so none
// added in between is missed), and each new one added to the filter's
// worker set in the sandbox's namespace (egress_nft.go) by the same
// installer, nsenter and the worker's binary, within milliseconds of
// the kernel's announcement. Addresses the worker loses stay rejected.

// addrWatch is a subscription to the worker's IPv4 address changes.
type addrWatch struct {
	f *os.File // the netlink socket; reads block on Go's poller, Close ends them
}

// watchAddresses subscribes to the worker's IPv4 address changes.
func watchAddresses() (*addrWatch, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("cannot open a netlink socket to follow the worker's addresses: %v", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_IPV4_IFADDR}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("cannot follow the worker's addresses over netlink: %v", err)
	}
	return &addrWatch{f: os.NewFile(uintptr(fd), "netlink")}, nil
}

// close ends the subscription, and a next waiting on it.
func (w *addrWatch) close() { w.f.Close() }

// errMissed: the socket's buffer overflowed and announcements were
// lost; the caller lists the addresses again.
var errMissed = errors.New("netlink announcements were lost")

// next waits for the next announcements and returns the IPv4 addresses
// they add; errMissed when some were lost, os.ErrClosed once closed.
func (w *addrWatch) next() ([]netip.Addr, error) {
	buf := make([]byte, 64<<10)
	n, err := w.f.Read(buf)
	if errors.Is(err, unix.ENOBUFS) {
		return nil, errMissed
	}
	if err != nil {
		return nil, err
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return nil, fmt.Errorf("unreadable netlink announcement: %v", err)
	}
	var added []netip.Addr
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWADDR || len(m.Data) < unix.SizeofIfAddrmsg || m.Data[0] != unix.AF_INET {
			continue
		}
		attrs, err := syscall.ParseNetlinkRouteAttr(&m)
		if err != nil {
			continue
		}
		// IFA_LOCAL is the interface's own address where it differs from
		// IFA_ADDRESS (a point-to-point peer's), as the worker's listing
		// (net.InterfaceAddrs) reads them.
		var local, addr netip.Addr
		for _, a := range attrs {
			ip, ok := netip.AddrFromSlice(a.Value)
			switch {
			case !ok || !ip.Is4():
			case a.Attr.Type == unix.IFA_LOCAL:
				local = ip
			case a.Attr.Type == unix.IFA_ADDRESS:
				addr = ip
			}
		}
		if local.IsValid() {
			addr = local
		}
		if addr.IsValid() {
			added = append(added, addr)
		}
	}
	return added, nil
}

// followAddresses adds each address the worker gains to the filter in
// the command's namespaces until w is closed; known are the addresses
// the filter has. A failed addition calls failed (the command must not
// go on reaching an address its filter lacks) and ends the watch.
func (d *Driver) followAddresses(w *addrWatch, netns, userns *os.File, as ids, known []netip.Prefix, failed func(error)) {
	have := map[netip.Addr]bool{}
	for _, p := range known {
		have[p.Addr()] = true
	}
	for {
		added, err := w.next()
		if errors.Is(err, errMissed) {
			var all []netip.Prefix
			all, err = workerAddresses()
			for _, p := range all {
				added = append(added, p.Addr())
			}
		}
		if errors.Is(err, os.ErrClosed) {
			return
		}
		var fresh []netip.Prefix
		for _, a := range added {
			if !have[a] {
				fresh = append(fresh, netip.PrefixFrom(a, 32))
			}
		}
		if err == nil && len(fresh) > 0 {
			err = d.runEgressInstaller(netns, userns, egressPlan{Worker: fresh, AddWorker: true}, as)
		}
		if err != nil {
			failed(fmt.Errorf("the worker gained an address (%v) that the sandbox's egress filter could not take (%v), so the command was stopped", fresh, err))
			return
		}
		for _, p := range fresh {
			have[p.Addr()] = true
		}
		if len(fresh) > 0 && d.egressUpdated != nil {
			d.egressUpdated(fresh)
		}
	}
}
