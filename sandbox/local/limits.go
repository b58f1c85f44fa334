package local

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync/atomic"
	"syscall"
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

// limitsOf are the limits sandbox m runs under: those set when it was
// created, or this driver's for a sandbox made before there were any.
func (d *Driver) limitsOf(m *meta) limits {
	if m.Limits != nil {
		return *m.Limits
	}
	return limits{MemoryMiB: cmp.Or(m.Spec.MemoryMiB, d.defaultMemMiB), DiskMiB: d.diskMiB}
}

// applyLimits caps the command whose bubblewrap init is host process pid,
// which waits on its block fd: its processes (RLIMIT_NPROC in its user
// namespace, or a pids cgroup), its memory where a memory cgroup can be
// made (otherwise prlimit's RLIMIT_AS, set when bwrap started), and the
// size of every file it writes (RLIMIT_FSIZE). release, never nil, undoes
// what was set up, even when err says not all of it could be: call it once
// the init has exited.
func (d *Driver) applyLimits(pid int, lim limits) (release func() error, err error) {
	fsize := uint64(lim.DiskMiB) << 20
	if err := unix.Prlimit(pid, unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: fsize, Max: fsize}, nil); err != nil {
		return noRelease, fmt.Errorf("cannot limit the size of the sandbox's files (RLIMIT_FSIZE on pid %d): %v", pid, err)
	}
	cg := d.memCgroup
	memBytes := int64(lim.MemoryMiB) << 20
	maxProcs := 0
	switch p := d.procs.(type) {
	case rlimitProcs:
		if d.maxProcs > 0 {
			if _, err := p.apply(pid, d.maxProcs); err != nil {
				return noRelease, err
			}
		}
	case cgroupProcs:
		if d.maxProcs > 0 {
			maxProcs = d.maxProcs
			if cg.memory != "" && cg.version != p.cg.version {
				// One hierarchy each (cgroup v1 beside v2): two cgroups.
				relProcs, err := p.apply(pid, maxProcs)
				if err == nil {
					var relMem func() error
					relMem, err = cg.apply(pid, 0, memBytes)
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
	return cg.apply(pid, maxProcs, memBytes)
}

// diskUsage is what the sandbox in dir holds in its workdir and /tmp, in
// bytes of disk (st_blocks): the walk never follows a symlink.
func diskUsage(dir string) int64 {
	var total int64
	for _, sub := range []string{workDir, tmpDir} {
		filepath.WalkDir(filepath.Join(dir, sub), func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return nil // gone meanwhile, or unreadable: what can be read counts
			}
			if info, err := e.Info(); err == nil {
				if st, ok := info.Sys().(*syscall.Stat_t); ok {
					total += st.Blocks * 512
				}
			}
			return nil
		})
	}
	return total
}

// errDiskFull says a sandbox holds more than its disk limit.
func errDiskFull(used int64, lim limits, doing string) error {
	return fmt.Errorf("disk: the sandbox's workdir and /tmp hold %d MiB, over its limit of %d MiB, so %s; remove files in it, or raise the limit in the bundle config (the local backend's disk_mib option, %d MiB by default)", used>>20, lim.DiskMiB, doing, DefaultDiskMiB)
}

// diskWatch checks, while a command runs, what the sandbox in dir holds,
// and calls over once it passes limitBytes. Each look costs a walk of the
// two directories: the next comes after at least a second, and at least
// twenty times as long as the last walk took.
type diskWatch struct {
	stop chan struct{}
	done chan struct{}
	over atomic.Int64 // the usage seen over the limit; 0 while under
}

func watchDisk(dir string, limitBytes int64, over func()) *diskWatch {
	w := &diskWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		wait := time.Second
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(wait):
			}
			t0 := time.Now()
			if used := diskUsage(dir); used > limitBytes {
				w.over.Store(used)
				over()
				return
			}
			wait = max(time.Second, 20*time.Since(t0))
		}
	}()
	return w
}

// end stops the watch and returns the usage it saw over the limit, 0 if
// none.
func (w *diskWatch) end() int64 {
	close(w.stop)
	<-w.done
	return w.over.Load()
}

// usageFresh is how long a measured usage stands for the next checks:
// staging a thousand files must not walk the sandbox a thousand times.
const usageFresh = time.Second

type usageEntry struct {
	bytes int64
	at    time.Time
}

// usage is what sandbox id (in dir) holds, from a walk at most usageFresh
// old plus what WriteFile has written since.
func (d *Driver) usage(id, dir string) int64 {
	d.usageMu.Lock()
	e, ok := d.usageOf[id]
	d.usageMu.Unlock()
	if ok && time.Since(e.at) < usageFresh {
		return e.bytes
	}
	e = usageEntry{bytes: diskUsage(dir), at: time.Now()}
	d.usageMu.Lock()
	if d.usageOf == nil {
		d.usageOf = map[string]usageEntry{}
	}
	d.usageOf[id] = e
	d.usageMu.Unlock()
	return e.bytes
}

// wrote adds n bytes written by WriteFile to the sandbox's usage.
func (d *Driver) wrote(id string, n int64) {
	d.usageMu.Lock()
	defer d.usageMu.Unlock()
	if e, ok := d.usageOf[id]; ok {
		e.bytes += n
		d.usageOf[id] = e
	}
}

// forgetUsage drops what is known of a sandbox's usage: a command ran.
func (d *Driver) forgetUsage(id string) {
	d.usageMu.Lock()
	defer d.usageMu.Unlock()
	delete(d.usageOf, id)
}

// diskRoom is how many bytes may still be written into sandbox id (in
// dir) before it holds more than its limit.
func (d *Driver) diskRoom(id, dir string, lim limits) (int64, error) {
	used := d.usage(id, dir)
	room := int64(lim.DiskMiB)<<20 - used
	if room <= 0 {
		return 0, errDiskFull(used, lim, "nothing more can be written")
	}
	return room, nil
}

// errFileTooBig marks a write that would pass the disk limit.
var errFileTooBig = errors.New("the file would pass the sandbox's disk limit")
