package local

import (
	"cmp"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Memory and disk limits every local sandbox has. Without them a command
// allocated and touched 3 GiB on a root worker, and wrote 6 GiB into its
// workdir. The bundle config raises them (the local backend's
// default_memory_mib and disk_mib options; a spec's memory_mib).
const (
	DefaultMemoryMiB = 2048
	DefaultDiskMiB   = 4096
)

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
