package local

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airflow-sandbox/airflow-go-worker/internal/randhex"
)

// Process limits. A fork bomb in a sandbox ran to 3000+ processes; now the
// processes and threads of a sandbox are capped, with one of two kernel
// mechanisms, depending on how the worker runs:
//
//   - not root: RLIMIT_NPROC, set on bubblewrap's init once it is inside the
//     sandbox's new user namespace and before it starts the command (bwrap
//     waits on --block-fd meanwhile). The kernel counts RLIMIT_NPROC per user
//     namespace (Linux 5.14+), so only the command's own processes count.
//     Set before bwrap creates the namespace, the limit would count every
//     process of the worker's user instead. Each command is a namespace of
//     its own, so commands running at once each have the limit; all of
//     them together count against the worker user's own RLIMIT_NPROC.
//   - root: the kernel never enforces RLIMIT_NPROC for uid 0, so each
//     sandbox gets a pids cgroup below the worker's, which all its commands
//     share: cgroup v2 when the worker's cgroup offers the pids controller
//     to its children, else cgroup v1's pids hierarchy.
//
// When neither works, Create refuses (unless the limit is turned off).

// DefaultMaxProcesses caps a sandbox's processes and threads when
// Options.MaxProcesses is 0: far above what builds, interpreters and JVMs
// use, far below what exhausts a host's pids.
const DefaultMaxProcesses = 1024

// procLimiter caps the processes of one command.
type procLimiter interface {
	// apply caps at max the processes of the command whose bubblewrap
	// init is host process pid, which has not started the command yet, and
	// where it can of all commands of its sandbox, whose cgroup would be
	// named sandboxCg. release, never nil, undoes what apply set up, even
	// when it failed half-way; call it once the init has exited.
	apply(pid int, sandboxCg string, max int) (release func() error, err error)
	String() string
}

// rlimitProcs sets RLIMIT_NPROC on bwrap's init, inside its user namespace.
type rlimitProcs struct{}

func (rlimitProcs) String() string { return "RLIMIT_NPROC in the sandbox's user namespace" }

func (rlimitProcs) apply(pid int, _ string, max int) (func() error, error) {
	lim := unix.Rlimit{Cur: uint64(max), Max: uint64(max)}
	if err := unix.Prlimit(pid, unix.RLIMIT_NPROC, &lim, nil); err != nil {
		return noRelease, fmt.Errorf("cannot limit the sandbox's processes (RLIMIT_NPROC on pid %d): %v", pid, err)
	}
	return noRelease, nil
}

// noRelease is the release of limits that need no undoing.
func noRelease() error { return nil }

// kernelAtLeast reports whether the running kernel is major.minor or newer.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var ma, mi int
	_, _ = fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi) // unreadable: counts as old
	return ma > major || (ma == major && mi >= minor)
}

// cgroupPrefix names the per-command cgroups, so stale ones can be found.
const cgroupPrefix = "airflow-go-worker-"

// driverCgroupPrefix begins the names of one driver's cgroups and mount
// points: this process's identity (workerID), so that a later worker can
// tell whether it is gone; its sandbox root's tag (rootTag), so that a
// worker clears only its own root's leftovers; and an id of the driver's
// own, so that it (and a test checking that it left none) can tell its
// cgroups from another's.
func driverCgroupPrefix(root string) string {
	return cgroupPrefix + thisWorker().String() + "-" + rootTag(root) + "-" + randhex.String(4) + "-"
}

// rootTag names a sandbox root in cgroup names: the cgroups are host-wide,
// the roots are not, and a worker removes a dead worker's cgroups only when
// they belong to its own root (two roots' workers, say two test processes,
// leave each other's alone). "r" and 8 hex digits, which no name made before
// it carries there.
func rootTag(root string) string {
	sum := sha256.Sum256([]byte(root))
	return "r" + hex.EncodeToString(sum[:4])
}

// cgroupLimiter puts each command in a cgroup of its own below the
// worker's, with the limits this worker can set there: the process limit
// (pids, for a root worker) and the memory limit (memory, for any worker
// whose cgroup offers the controller). In cgroup v2 both live in one
// directory, as a process is in one cgroup only; in v1 each controller has
// its hierarchy.
//
// The process limit is the sandbox's, shared by all its commands (a
// worker's, or several workers' at once): a command's pids cgroup lies
// in one of the sandbox's (sandboxCgroup), which holds pids.max, so the
// worker's process budget can sum one limit per sandbox. That cgroup is
// made by whichever command needs it and removed by the last to end.
type cgroupLimiter struct {
	version string // "v1" or "v2", for messages
	pids    string // parent of the per-sandbox pids cgroups; "" = not set here
	memory  string // parent of the per-command memory cgroups; "" = not set here
	prefix  string // the driver's cgroup names begin so (driverCgroupPrefix)
}

func (c cgroupLimiter) String() string {
	var parts []string
	if c.pids != "" {
		parts = append(parts, "pids under "+c.pids)
	}
	if c.memory != "" {
		parts = append(parts, "memory under "+c.memory)
	}
	return "cgroups (" + c.version + "): " + strings.Join(parts, ", ")
}

// sandboxCgroupPrefix names the sandboxes' cgroups: then a hash of the
// sandbox root (two roots may hold sandboxes of one name) and the name.
const sandboxCgroupPrefix = cgroupPrefix + "sandbox-"

// sandboxCgroup names the cgroup that sandbox name's commands share.
func (d *Driver) sandboxCgroup(name string) string {
	return sandboxCgroupPrefix + rootTag(d.root)[1:] + "-" + name
}

// cgLimit is a value written to a cgroup's file; a file whose name ends
// in '?' may be missing.
type cgLimit struct{ file, value string }

// apply caps the command whose bubblewrap init is host process pid, a
// command of the sandbox whose cgroup is named sandboxCg: maxProcs
// processes for the sandbox (0: none set here) and memBytes of memory,
// swap included, for the command (0: none set here). release removes the
// cgroups it made, even when it failed half-way: call it once the init has
// exited, as a cgroup cannot be removed while a process is in it.
func (c cgroupLimiter) apply(pid int, sandboxCg string, maxProcs int, memBytes int64) (func() error, error) {
	var mem []cgLimit
	if memBytes > 0 && c.memory != "" {
		mem = c.memoryLimits(memBytes)
	}
	var made []string // the command's cgroups
	shared := ""      // the sandbox's, once this command made or joined it
	release := func() error {
		var errs []error
		for _, dir := range made {
			errs = append(errs, removeCgroup(dir))
		}
		if shared != "" {
			_ = unix.Rmdir(shared) // fails while another command of the sandbox runs
		}
		return errors.Join(errs...)
	}
	if maxProcs > 0 && c.pids != "" {
		var withMem []cgLimit
		if c.version == "v2" && c.memory == c.pids {
			withMem, mem = mem, nil // one hierarchy: one cgroup holds both
		}
		dir, err := c.commandCgroup(filepath.Join(c.pids, sandboxCg), maxProcs, withMem)
		shared = filepath.Join(c.pids, sandboxCg)
		if dir != "" {
			made = append(made, dir)
		}
		if err == nil {
			err = joinCgroup(dir, pid)
		}
		if err != nil {
			return release, err
		}
	}
	if len(mem) > 0 {
		dir, err := os.MkdirTemp(c.memory, c.prefix)
		if err != nil {
			return release, fmt.Errorf("cannot create a cgroup under %s to limit the sandbox: %v", c.memory, err)
		}
		made = append(made, dir)
		if err := setLimits(dir, mem); err != nil {
			return release, err
		}
		if err := joinCgroup(dir, pid); err != nil {
			return release, err
		}
	}
	return release, nil
}

// memoryLimits are the files that cap a command's memory and swap.
func (c cgroupLimiter) memoryLimits(memBytes int64) []cgLimit {
	mem := strconv.FormatInt(memBytes, 10)
	if c.version == "v2" {
		return []cgLimit{{"memory.max", mem}, {"memory.swap.max?", "0"}}
	}
	// memsw (memory and swap) can only be set once the memory limit is,
	// and exists only where swap accounting is on. Socket buffers count
	// apart, in kmem.tcp (limits.go), where the kernel has it.
	return []cgLimit{{"memory.limit_in_bytes", mem}, {"memory.memsw.limit_in_bytes?", mem}, {"memory.kmem.tcp.limit_in_bytes?", mem}}
}

// commandCgroup makes a command's cgroup, with limits ls, in the sandbox's
// cgroup sb, which it makes (or finds) capped at maxProcs. It returns the
// command's cgroup whenever it made one, for the release to remove.
func (c cgroupLimiter) commandCgroup(sb string, maxProcs int, ls []cgLimit) (string, error) {
	for try := 0; ; try++ {
		err := os.Mkdir(sb, 0o755)
		if err == nil || errors.Is(err, fs.ErrExist) {
			err = setLimits(sb, []cgLimit{{"pids.max", strconv.Itoa(maxProcs)}})
		}
		if err == nil && len(ls) > 0 && c.version == "v2" {
			err = setLimits(sb, []cgLimit{{"cgroup.subtree_control", "+memory"}})
		}
		var dir string
		if err == nil {
			if dir, err = os.MkdirTemp(sb, c.prefix); err == nil {
				return dir, setLimits(dir, ls)
			}
		}
		// The last command of the sandbox to end removed its cgroup
		// meanwhile (ENOENT once gone, ENODEV while it goes): make it
		// again.
		if !(errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV)) || try == 8 {
			return "", fmt.Errorf("cannot make the sandbox's pids cgroup %s: %v", sb, err)
		}
	}
}

// setLimits writes limits ls into cgroup dir.
func setLimits(dir string, ls []cgLimit) error {
	for _, l := range ls {
		name, optional := strings.CutSuffix(l.file, "?")
		if err := os.WriteFile(filepath.Join(dir, name), []byte(l.value), 0); err != nil && !(optional && errors.Is(err, fs.ErrNotExist)) {
			return fmt.Errorf("cannot set %s of cgroup %s: %w", name, dir, err)
		}
	}
	return nil
}

// joinCgroup moves process pid into cgroup dir.
func joinCgroup(dir string, pid int) error {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("cannot put the sandbox in cgroup %s: %v", dir, err)
	}
	return nil
}

// cgroupProcs caps processes with the pids controller of a cgroupLimiter.
type cgroupProcs struct{ cg cgroupLimiter }

func (c cgroupProcs) String() string {
	return "a pids cgroup (" + c.cg.version + ") per sandbox under " + c.cg.pids
}

func (c cgroupProcs) apply(pid int, sandboxCg string, max int) (func() error, error) {
	pidsOnly := c.cg
	pidsOnly.memory = ""
	return pidsOnly.apply(pid, sandboxCg, max, 0)
}

// removeCgroup removes a command's cgroup, which must be empty by now:
// its release waits until bubblewrap's init has exited (Driver.run), and
// the kernel ends every other process of the command's pid namespace
// before that. Retrying EBUSY for a while instead left cgroups behind
// whenever the processes took longer to die than the retries lasted, or
// when one was removed with the init still in it. One that fails anyway
// is removed by a later worker (removeLeftoverCgroups).
func removeCgroup(dir string) error {
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("cannot remove the command's cgroup %s: %v", dir, err)
	}
	return nil
}

// procLimiterFor picks the mechanism for this worker, or says why none
// works; cgroups it makes are named with prefix.
func procLimiterFor(prefix string) (procLimiter, error) {
	if os.Getuid() != 0 && os.Geteuid() != 0 {
		return rlimitProcs{}, nil
	}
	parent, version, err := ownCgroupFor("pids")
	if err != nil {
		return nil, err
	}
	return cgroupProcs{cgroupLimiter{version: version, pids: parent, prefix: prefix}}, nil
}

// ownCgroupFor finds, below this process's own cgroup, where per-command
// cgroups of controller may be made.
func ownCgroupFor(controller string) (parent, version string, err error) {
	self, err1 := os.ReadFile("/proc/self/cgroup")
	mounts, err2 := os.ReadFile("/proc/self/mountinfo")
	if err := errors.Join(err1, err2); err != nil {
		return "", "", err
	}
	return findCgroup(controller, self, mounts, func(dir string) error { return unix.Access(dir, unix.W_OK) })
}

// findCgroup finds a writable directory under which per-command cgroups of
// controller nest below the worker's own cgroup, from /proc/self/cgroup and
// /proc/self/mountinfo. cgroup v2 needs the controller in the worker's
// cgroup.subtree_control (nothing here writes it: that is the host's
// configuration); cgroup v1 needs its hierarchy mounted writable.
func findCgroup(controller string, self, mountinfo []byte, writable func(string) error) (parent, version string, err error) {
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
		case slices.Contains(strings.Split(f[1], ","), controller):
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
			if err != nil || !slices.Contains(strings.Fields(string(ctl)), controller) {
				why = append(why, fmt.Sprintf("cgroup v2: %s does not offer the %s controller to its children (cgroup.subtree_control)", dir, controller))
				continue
			}
			if err := writable(dir); err != nil {
				why = append(why, fmt.Sprintf("cgroup v2: %s is not writable (%v)", dir, err))
				continue
			}
			return dir, "v2", nil
		case fstype == "cgroup" && v1Path != "" && slices.Contains(strings.Split(opts, ","), controller):
			dir, ok := cgroupDir(mnt, root, v1Path)
			if !ok {
				continue
			}
			if err := writable(dir); err != nil {
				why = append(why, fmt.Sprintf("cgroup v1: %s is not writable (%v)", dir, err))
				continue
			}
			return dir, "v1", nil
		}
	}
	if len(why) == 0 {
		why = append(why, "no "+controller+" cgroup is mounted")
	}
	return "", "", errors.New(strings.Join(why, "; "))
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
