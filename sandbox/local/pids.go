package local

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Process limits. A fork bomb in a sandbox ran to 3000+ processes; now the
// processes and threads of each command are capped, with one of two kernel
// mechanisms, depending on how the worker runs:
//
//   - not root: RLIMIT_NPROC, set on bubblewrap's init once it is inside the
//     sandbox's new user namespace and before it starts the command (bwrap
//     waits on --block-fd meanwhile). The kernel counts RLIMIT_NPROC per user
//     namespace (Linux 5.14+), so only the sandbox's own processes count.
//     Set before bwrap creates the namespace, the limit would count every
//     process of the worker's user instead.
//   - root: the kernel never enforces RLIMIT_NPROC for uid 0, so each
//     command gets a pids cgroup of its own below the worker's: cgroup v2
//     when the worker's cgroup offers the pids controller to its children,
//     else cgroup v1's pids hierarchy.
//
// When neither works, Create refuses (unless the limit is turned off).

// DefaultMaxProcesses caps a sandbox's processes and threads when
// Options.MaxProcesses is 0: far above what builds, interpreters and JVMs
// use, far below what exhausts a host's pids.
const DefaultMaxProcesses = 1024

// procLimiter caps the processes of one command.
type procLimiter interface {
	// apply caps the command whose bubblewrap init is host process pid,
	// which has not started the command yet. release undoes what apply set
	// up, once the command has ended.
	apply(pid, max int) (release func(), err error)
	String() string
}

// rlimitProcs sets RLIMIT_NPROC on bwrap's init, inside its user namespace.
type rlimitProcs struct{}

func (rlimitProcs) String() string { return "RLIMIT_NPROC in the sandbox's user namespace" }

func (rlimitProcs) apply(pid, max int) (func(), error) {
	lim := unix.Rlimit{Cur: uint64(max), Max: uint64(max)}
	if err := unix.Prlimit(pid, unix.RLIMIT_NPROC, &lim, nil); err != nil {
		return nil, fmt.Errorf("cannot limit the sandbox's processes (RLIMIT_NPROC on pid %d): %v", pid, err)
	}
	return func() {}, nil
}

// kernelAtLeast reports whether the running kernel is major.minor or newer.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var ma, mi int
	fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi)
	return ma > major || (ma == major && mi >= minor)
}

// cgroupPrefix names the per-command cgroups, so stale ones can be found;
// this process's carry its pid too.
const cgroupPrefix = "airflow-go-worker-"

func ownCgroupPrefix() string { return cgroupPrefix + strconv.Itoa(os.Getpid()) + "-" }

// cgroupProcs makes a pids cgroup per command below parent.
type cgroupProcs struct {
	parent  string
	version string // "v1" or "v2", for messages
}

func (c cgroupProcs) String() string { return "a pids cgroup (" + c.version + ") under " + c.parent }

func (c cgroupProcs) apply(pid, max int) (func(), error) {
	dir, err := os.MkdirTemp(c.parent, ownCgroupPrefix())
	if err != nil {
		return nil, fmt.Errorf("cannot create a pids cgroup under %s to limit the sandbox's processes: %v", c.parent, err)
	}
	err = os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(max)), 0)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
	}
	release := func() { removeCgroup(dir) }
	if err != nil {
		release()
		return nil, fmt.Errorf("cannot put the sandbox in pids cgroup %s: %v", dir, err)
	}
	return release, nil
}

// removeCgroup removes a command's cgroup. When bwrap has exited, its pid
// namespace is gone and the cgroup is empty; a straggler being released
// still holds it for a moment, so a few attempts are made. One left behind
// is removed by a later New (removeStaleCgroups).
func removeCgroup(dir string) {
	for wait := time.Millisecond; wait < 2*time.Second; wait *= 2 {
		if err := unix.Rmdir(dir); !errors.Is(err, unix.EBUSY) {
			return // removed, gone, or not ours to remove
		}
		time.Sleep(wait) // waiting for the kernel to release the last task
	}
}

// staleCgroup is how old a command's cgroup must be before New takes it for
// a leftover (a worker killed mid-command), not one in use.
const staleCgroup = 10 * time.Minute

func removeStaleCgroups(parent string, now time.Time) {
	entries, _ := os.ReadDir(parent)
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), cgroupPrefix) {
			continue
		}
		if st, err := e.Info(); err == nil && now.Sub(st.ModTime()) > staleCgroup {
			unix.Rmdir(filepath.Join(parent, e.Name())) // fails harmlessly while in use
		}
	}
}

// procLimiterFor picks the mechanism for this worker, or says why none works.
func procLimiterFor() (procLimiter, error) {
	if os.Getuid() != 0 && os.Geteuid() != 0 {
		return rlimitProcs{}, nil
	}
	self, err1 := os.ReadFile("/proc/self/cgroup")
	mounts, err2 := os.ReadFile("/proc/self/mountinfo")
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	return findPidsCgroup(self, mounts, func(dir string) error { return unix.Access(dir, unix.W_OK) })
}

// findPidsCgroup finds a writable directory under which per-command pids
// cgroups nest below the worker's own cgroup, from /proc/self/cgroup and
// /proc/self/mountinfo. cgroup v2 needs pids in the worker's
// cgroup.subtree_control (nothing here writes it: that is the host's
// configuration); cgroup v1 needs the pids hierarchy mounted writable.
func findPidsCgroup(self, mountinfo []byte, writable func(string) error) (cgroupProcs, error) {
	var v1Path, v2Path string
	hasV2 := false
	for _, line := range strings.Split(strings.TrimSpace(string(self)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "":
			v2Path, hasV2 = f[2], true
		case slices.Contains(strings.Split(f[1], ","), "pids"):
			v1Path = f[2]
		}
	}
	var why []string
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := slices.Index(f, "-")
		if sep < 5 || len(f) < sep+4 {
			continue
		}
		root, mnt, fstype, opts := f[3], unescapeMount(f[4]), f[sep+1], f[sep+3]
		switch {
		case fstype == "cgroup2" && hasV2:
			dir, ok := cgroupDir(mnt, root, v2Path)
			if !ok {
				continue
			}
			ctl, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
			if err != nil || !slices.Contains(strings.Fields(string(ctl)), "pids") {
				why = append(why, fmt.Sprintf("cgroup v2: %s does not offer the pids controller to its children (cgroup.subtree_control)", dir))
				continue
			}
			if err := writable(dir); err != nil {
				why = append(why, fmt.Sprintf("cgroup v2: %s is not writable (%v)", dir, err))
				continue
			}
			return cgroupProcs{parent: dir, version: "v2"}, nil
		case fstype == "cgroup" && v1Path != "" && slices.Contains(strings.Split(opts, ","), "pids"):
			dir, ok := cgroupDir(mnt, root, v1Path)
			if !ok {
				continue
			}
			if err := writable(dir); err != nil {
				why = append(why, fmt.Sprintf("cgroup v1: %s is not writable (%v)", dir, err))
				continue
			}
			return cgroupProcs{parent: dir, version: "v1"}, nil
		}
	}
	if len(why) == 0 {
		why = append(why, "no pids cgroup is mounted")
	}
	return cgroupProcs{}, errors.New(strings.Join(why, "; "))
}

// cgroupDir is where cgroup path p (as /proc/self/cgroup gives it) lies
// under a mount of the hierarchy whose root is root.
func cgroupDir(mnt, root, p string) (string, bool) {
	if root != "/" {
		rest, ok := strings.CutPrefix(p, root)
		if !ok || (rest != "" && !strings.HasPrefix(rest, "/")) {
			return "", false
		}
		p = rest
	}
	return filepath.Join(mnt, p), true
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
