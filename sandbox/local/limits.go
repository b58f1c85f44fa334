package local

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Memory and disk limits every local sandbox has. Without them a command
// allocated and touched 3 GiB on a root worker, and wrote 6 GiB into its
// workdir. The bundle config raises them (the local backend's
// default_memory_mib and disk_mib options; a spec's memory_mib).
const (
	DefaultMemoryMiB = 2048
	DefaultDiskMiB   = 4096
)

// Socket buffers. A sandbox's sockets hold kernel memory that no
// process's own memory shows: 900 connections to a server that never
// reads queued 1.07 GiB, past the host's tcp_mem pressure line (where
// every TCP socket of the host, Airflow's database connections among
// them, starts to fail), and a sandbox with memory_mib 256 queued 290 MiB
// over its own loopback (issue 38). Bounds:
//   - the sandbox's own sockets: in its memory cgroup, with memory_mib:
//     cgroup v2 charges socket buffers to memory.max; cgroup v1 keeps
//     them apart, in memory.kmem.tcp.limit_in_bytes, which is set to
//     memory_mib too (so a v1 sandbox may hold memory_mib of memory and
//     as much again of TCP buffers). Where neither counts them (no memory
//     cgroup, a v1 kernel without kmem.tcp), only the number of its open
//     files is bounded (sandboxFiles per process), which bounds little.
//   - slirp4netns, whose host sockets carry an open sandbox's traffic:
//     a memory cgroup of its own per command, of networkMemMiB (v1: its
//     memory and, apart, its TCP buffers, each), and sandboxFiles open
//     files, so at most about as many connections; without a memory
//     cgroup, an address-space limit of networkMemMiB.

// DefaultNetworkMemoryMiB bounds each open-network command's slirp4netns
// (NetworkMemoryEnv raises it).
const DefaultNetworkMemoryMiB = 256

// NetworkMemoryEnv is the operator's bound, in MiB, on the memory of
// each open-network command's slirp4netns, its socket buffers included.
const NetworkMemoryEnv = "AIRFLOW_GO_WORKER_LOCAL_NETWORK_MEMORY_MIB"

// sandboxFiles is the open-file limit (RLIMIT_NOFILE) of slirp4netns,
// and of a sandbox's processes where its socket buffers count nowhere.
const sandboxFiles = 1024

// networkMemoryMiB is opts's bound, else NetworkMemoryEnv's, else the
// default.
func networkMemoryMiB(opt int) (int, error) {
	if opt > 0 {
		return opt, nil
	}
	v := os.Getenv(NetworkMemoryEnv)
	if v == "" {
		return DefaultNetworkMemoryMiB, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 16 || n > 1<<20 {
		return 0, fmt.Errorf("%s=%q is not a size in MiB from 16 to %d; give the memory each open-network sandbox's slirp4netns may use, socket buffers included (%d by default)", NetworkMemoryEnv, v, 1<<20, DefaultNetworkMemoryMiB)
	}
	return n, nil
}

// socketsCounted says whether the memory cgroups of this worker count
// socket buffers: cgroup v2 always, v1 where the kernel has kmem.tcp.
func (c cgroupLimiter) socketsCounted() bool {
	if c.memory == "" {
		return false
	}
	if c.version == "v2" {
		return true
	}
	_, err := os.Stat(filepath.Join(c.memory, "memory.kmem.tcp.limit_in_bytes"))
	return err == nil
}

// limitNetworkHelper bounds slirp4netns (host process pid), which has
// made no socket for the sandbox yet (the command waits on its block fd
// until the network is ready): release, never nil, removes its cgroup
// once it has exited.
func (d *Driver) limitNetworkHelper(pid int) (release func() error, err error) {
	files := unix.Rlimit{Cur: sandboxFiles, Max: sandboxFiles}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &files, nil); err != nil {
		return noRelease, fmt.Errorf("cannot limit slirp4netns's open files: %v", err)
	}
	bytes := int64(d.networkMemMiB) << 20
	if d.memCgroup.memory == "" {
		as := unix.Rlimit{Cur: uint64(bytes), Max: uint64(bytes)}
		if err := unix.Prlimit(pid, unix.RLIMIT_AS, &as, nil); err != nil {
			return noRelease, fmt.Errorf("cannot limit slirp4netns's memory: %v", err)
		}
		return noRelease, nil
	}
	cg := d.memCgroup
	cg.prefix += networkCgroup
	return cg.apply(pid, "", 0, bytes)
}

// networkCgroup follows the driver's prefix in slirp4netns's cgroups.
const networkCgroup = "net-"

// limitsOf are the limits sandbox m runs under: those set when it was
// created, or this driver's for a sandbox made before there were any.
func (d *Driver) limitsOf(m *meta) limits {
	if m.Limits != nil {
		return *m.Limits
	}
	return limits{MemoryMiB: cmp.Or(m.Spec.MemoryMiB, d.defaultMemMiB), DiskMiB: d.diskMiB, DiskInodes: d.diskInodes}
}

// applyLimits caps the command whose bubblewrap init is host process pid,
// which waits on its block fd: its processes (RLIMIT_NPROC in its user
// namespace, or its sandbox's pids cgroup, sandboxCg), its memory where a memory cgroup can be
// made (otherwise prlimit's RLIMIT_AS, set when bwrap started). Its disk
// is its sandbox's filesystem (disk.go). release, never nil, undoes
// what was set up, even when err says not all of it could be: call it once
// the init has exited.
func (d *Driver) applyLimits(pid int, sandboxCg string, lim limits) (release func() error, err error) {
	if !d.memCgroup.socketsCounted() { // its open files, at least (limits above)
		files := unix.Rlimit{Cur: sandboxFiles, Max: sandboxFiles}
		if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &files, nil); err != nil {
			return noRelease, fmt.Errorf("cannot limit the sandbox's open files (RLIMIT_NOFILE on pid %d): %v", pid, err)
		}
	}
	cg := d.memCgroup
	memBytes := int64(lim.MemoryMiB) << 20
	maxProcs := 0
	switch p := d.procs.(type) {
	case rlimitProcs:
		if n := d.procsOf(lim); n > 0 {
			if _, err := p.apply(pid, sandboxCg, n); err != nil {
				return noRelease, err
			}
		}
	case cgroupProcs:
		if maxProcs = d.procsOf(lim); maxProcs > 0 {
			if cg.memory != "" && cg.version != p.cg.version {
				// One hierarchy each (cgroup v1 beside v2): two cgroups.
				relProcs, err := p.apply(pid, sandboxCg, maxProcs)
				if err == nil {
					var relMem func() error
					relMem, err = cg.apply(pid, sandboxCg, 0, memBytes)
					return func() error { return errors.Join(relMem(), relProcs()) }, err
				}
				return relProcs, err
			}
			cg.version, cg.pids = p.cg.version, p.cg.pids
		}
	}
	if cg.pids == "" && cg.memory == "" {
		return noRelease, nil
	}
	return cg.apply(pid, sandboxCg, maxProcs, memBytes)
}

// errDiskFull explains a command's failure when its sandbox's filesystem
// was full: the command itself saw ENOSPC ("No space left on device").
func errDiskFull(lim limits) string {
	return fmt.Sprintf("disk: the sandbox's workdir and /tmp filled their limit (disk_mib %d MiB, %d files and directories), so writes failed with \"No space left on device\"; remove files in the sandbox, or raise disk_mib (or disk_inodes) in the local backend's bundle config (%d MiB by default)", lim.DiskMiB, lim.DiskInodes, DefaultDiskMiB)
}

// fullWatch notes, while a command runs, whether its sandbox's filesystem
// was ever full: files a command held open and unlinked are freed when it
// ends, so a look at the end alone would miss why it failed. A look is one
// statfs.
type fullWatch struct {
	stop chan struct{}
	done chan struct{}
	seen atomic.Bool
}

const fullLookEvery = 100 * time.Millisecond

func (d *Driver) watchFull(m *meta, dir string) *fullWatch {
	w := &fullWatch{stop: make(chan struct{}), done: make(chan struct{})}
	if !ownDisk(m) {
		close(w.done)
		return w
	}
	go func() {
		defer close(w.done)
		t := time.NewTicker(fullLookEvery)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
				if d.diskFull(m, dir) {
					w.seen.Store(true)
					return
				}
			}
		}
	}()
	return w
}

// end stops the watch and reports whether the filesystem was full at any
// look, or is now.
func (w *fullWatch) end(d *Driver, m *meta, dir string) bool {
	close(w.stop)
	<-w.done
	return w.seen.Load() || d.diskFull(m, dir)
}
