package local

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// What a worker killed mid-command (kill -9, an OOM kill) leaves behind:
// the mounts of sandbox filesystems it had mounted (each holding a loop
// device), its per-command cgroups, and a create it was making. Each
// bears the worker's identity in its name (workerID), so whichever worker
// process comes next, on any operation, or the sweep, can tell a dead
// worker's leftovers from a live one's and remove them.

// workerID identifies a worker process for as long as it lives: its pid,
// its pid namespace (a pid means nothing outside it) and its start time
// in clock ticks after boot, which a later process given the same pid
// does not share.
type workerID struct {
	pid   int
	pidNS uint64
	start uint64
}

// String is how names carry it: <pid>-p<pid namespace>t<start time>.
func (w workerID) String() string {
	return strconv.Itoa(w.pid) + "-p" + strconv.FormatUint(w.pidNS, 10) + "t" + strconv.FormatUint(w.start, 10)
}

// parseWorkerID reads a workerID at the start of s, as String wrote it
// (what follows it, after a '-', is the caller's).
func parseWorkerID(s string) (workerID, bool) {
	pid, rest, ok1 := strings.Cut(s, "-p")
	ns, rest, ok2 := strings.Cut(rest, "t")
	start, _, _ := strings.Cut(rest, "-")
	var w workerID
	var err1, err2, err3 error
	w.pid, err1 = strconv.Atoi(pid)
	w.pidNS, err2 = strconv.ParseUint(ns, 10, 64)
	w.start, err3 = strconv.ParseUint(start, 10, 64)
	return w, ok1 && ok2 && errors.Join(err1, err2, err3) == nil && w.pid > 0
}

// workerOf reads the worker identity in the name of a per-command cgroup
// or a mount point (cgroupPrefix, then the workerID); false for names of
// other forms, such as those made before names carried one.
func workerOf(name string) (workerID, bool) {
	rest, ok := strings.CutPrefix(name, cgroupPrefix)
	if !ok {
		return workerID{}, false
	}
	return parseWorkerID(rest)
}

// thisWorker is this process's identity, read once.
var thisWorker = sync.OnceValue(func() workerID {
	w := workerID{pid: os.Getpid(), pidNS: pidNamespace()}
	w.start, _ = processStart(w.pid) // unreadable: 0, which no other process shares either
	return w
})

// pidNamespace is the inode of this process's pid namespace.
func pidNamespace() uint64 {
	var st unix.Stat_t
	if unix.Stat("/proc/self/ns/pid", &st) != nil {
		return 0
	}
	return st.Ino
}

// processStart reads when process pid started (field 22 of
// /proc/<pid>/stat, after the command name, which may hold any byte).
func processStart(pid int) (uint64, error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat has no command name", pid)
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat is too short", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// gone reports whether worker w has exited: no process has its pid, or the
// one that has it started at another time (the pid was reused). A worker
// of another pid namespace is never taken for gone: its pids cannot be
// looked up here.
func (w workerID) gone() bool {
	if w.pidNS != thisWorker().pidNS || w.start == 0 {
		return false // nothing to compare (0: the worker could not read its own)
	}
	start, err := processStart(w.pid)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
		return true
	}
	return err == nil && start != w.start
}

// removeDeadWorkers clears what killed workers left under this driver's
// root and in its cgroups: New, Create and the sweep call it. What a live
// worker holds is never touched: a mount or cgroup is removed only when
// the worker named in it is gone, and a cgroup only once it is empty.
func (d *Driver) removeDeadWorkers() {
	d.removeDeadMounts()
	for _, parent := range d.cgroupParents() {
		removeLeftoverCgroups(parent, d.root, time.Now())
	}
	d.removeDeadCreates()
}

// cgroupParents are the directories under which this driver makes
// per-command cgroups.
func (d *Driver) cgroupParents() []string {
	var parents []string
	if p, ok := d.procs.(cgroupProcs); ok {
		parents = append(parents, p.cg.pids)
	}
	if d.memCgroup.memory != "" && (len(parents) == 0 || parents[0] != d.memCgroup.memory) {
		parents = append(parents, d.memCgroup.memory)
	}
	return parents
}

// removeDeadMounts unmounts the sandbox filesystems dead workers mounted
// under the root (<root>/<sandbox>/mnt/<worker's mount name>); the loop
// device behind one frees itself once its last mount is gone.
func (d *Driver) removeDeadMounts() {
	if d.mkfs == "" {
		return // this worker mounts nothing, nor may it unmount
	}
	for _, p := range mountsUnder(d.root) {
		rel := strings.Split(strings.TrimPrefix(p, d.root+"/"), "/")
		if len(rel) != 3 || rel[1] != diskMounts {
			continue
		}
		if w, ok := workerOf(rel[2]); !ok || !w.gone() {
			continue
		}
		if err := unmount(p); err != nil {
			d.log.Warn("cannot unmount a sandbox's disk a dead worker left mounted", "error", err)
			continue
		}
		os.Remove(p)
		d.log.Debug("unmounted a sandbox's disk a dead worker left mounted", "mount", p)
	}
}

// mountsUnder lists the mount points below dir, from this process's
// mountinfo (the host's mounts, as the worker sees them).
func mountsUnder(dir string) []string {
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		if p := unescapeMount(f[4]); strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	return out
}

// staleCgroup is how old a cgroup whose name carries no worker identity
// (one made before names did) must be before it is taken for a leftover.
const staleCgroup = 10 * time.Minute

// removeLeftoverCgroups removes, under parent, the per-command cgroups of
// workers on root that are gone, and then root's sandboxes' cgroups they
// leave empty (sandboxCgroupPrefix: one per sandbox, shared by its
// commands, which every command makes again). Another root's are left to
// its own workers. A cgroup that still holds a process cannot be removed:
// rmdir fails, harmlessly, and a later call tries again.
func removeLeftoverCgroups(parent, root string, now time.Time) {
	tag := rootTag(root)
	entries, _ := os.ReadDir(parent)
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		p := filepath.Join(parent, e.Name())
		switch {
		case strings.HasPrefix(e.Name(), sandboxCgroupPrefix) && !strings.HasPrefix(e.Name(), sandboxCgroupPrefix+tag[1:]+"-"):
			// another root's sandbox
		case strings.HasPrefix(e.Name(), sandboxCgroupPrefix):
			inner, _ := os.ReadDir(p)
			for _, c := range inner {
				if w, ok := workerOf(c.Name()); ok && c.IsDir() && w.gone() {
					_ = unix.Rmdir(filepath.Join(p, c.Name()))
				}
			}
			_ = unix.Rmdir(p) // only once no command of the sandbox runs
		case strings.HasPrefix(e.Name(), cgroupPrefix):
			if w, ok := workerOf(e.Name()); ok {
				if w.gone() && ofRoot(e.Name(), w, tag) {
					_ = unix.Rmdir(p)
				}
			} else if st, err := e.Info(); err == nil && now.Sub(st.ModTime()) > staleCgroup {
				_ = unix.Rmdir(p)
			}
		}
	}
}

// ofRoot says whether the cgroup name of worker w belongs to the root
// tagged tag; a name made before names carried a root tag belongs to any.
func ofRoot(name string, w workerID, tag string) bool {
	rest := strings.TrimPrefix(name, cgroupPrefix+w.String()+"-")
	if !strings.HasPrefix(rest, "r") {
		return true
	}
	return strings.HasPrefix(rest, tag+"-")
}

// removeDeadCreates removes the half-made sandboxes of creates whose worker
// died (their reservation names it), at once rather than after
// staleCreate: they count in no budget, but hold disk.
func (d *Driver) removeDeadCreates() {
	entries, err := os.ReadDir(d.root)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), ".creating-") {
			continue
		}
		p := filepath.Join(d.root, e.Name())
		if r, err := readReservation(p); err != nil || !r.owner.gone() {
			continue
		}
		if err := errors.Join(unmountDisk(p), forceRemoveAll(p)); err != nil {
			d.log.Warn("cannot remove a dead worker's half-made sandbox", "dir", p, "error", err)
		}
	}
}
