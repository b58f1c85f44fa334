// Package local is the embedded sandbox backend: each sandbox is a directory
// on the host and every command runs under bubblewrap (bwrap) in fresh user,
// pid, ipc, uts and network namespaces,
// with the host's system directories read-only, the sandbox's own directory
// read-write at the workdir, a private /tmp, and a clean environment.
//
// What the local backend enforces, and what it refuses rather than ignore:
//   - identity: under a root worker a sandbox's processes are root inside
//     and an unprivileged uid on the host (SandboxUIDEnv, userns.go);
//   - network: blocked (loopback only), or open: a network namespace of
//     the sandbox's own, connected through slirp4netns, from which the
//     worker's loopback and link-local addresses (the cloud metadata
//     service's among them) cannot be reached (network.go), nor the
//     worker's own addresses and private ranges, unless the operator
//     allows ranges (egress.go); allow_cidrs narrow a blocked network
//     through the same filter; host allowlists are refused;
//   - memory: memory_mib, else Options.DefaultMemoryMiB (DefaultMemoryMiB),
//     as a memory cgroup per command (memory and swap, all its processes
//     together) where the worker's cgroup lets it make one; elsewhere an
//     address-space rlimit (RLIMIT_AS) on every process of a command,
//     through prlimit(1), which programs that reserve far more virtual
//     memory than they use (the JVM, Go, some allocators) need headroom
//     under (limits.go);
//   - cpu: refused; the local backend cannot limit cpu;
//   - processes: each sandbox may run Options.MaxProcesses processes and
//     threads (DefaultMaxProcesses); see pids.go for how, and Create
//     refuses when this host offers no way;
//   - budgets: the disks and process limits of the live sandboxes under
//     the root add up to at most the worker's budgets, and Create refuses
//     a sandbox past them (budget.go);
//   - disk: the workdir and /tmp together hold at most Options.DiskMiB
//     (DefaultDiskMiB) in at most Options.DiskInodes files: they live on a
//     filesystem of the sandbox's own, a sparse ext4 image loop-mounted on
//     the host, so writes past it fail with ENOSPC whatever a command
//     does; a worker that cannot mount one (no CAP_SYS_ADMIN, no loop
//     devices) refuses specs unless the operator turns the limit off
//     (disk.go);
//   - image: "" runs on the host's userland; an absolute path to an unpacked
//     root filesystem runs on that instead, if it lies under one of
//     Options.ImageRoots (none by default) and neither it nor its top-level
//     entries can be changed by another host user; a registry tag is refused
//     (nothing is pulled) unless Options.IgnoreImage, which then uses the
//     host's tools;
//   - tmpfs: / and /dev are read-only; /dev/shm is a tmpfs of memory_mib
//     (64 MiB without a memory limit).
//
// Each command is its own process tree: background processes die when the
// command ends. The workdir and /tmp persist between commands (both are
// directories under the sandbox's directory on the host). The command's
// environment is exactly the spec's env plus PATH, HOME (the workdir) and
// LANG; it travels in bubblewrap's own environment, never on its command
// line, where ps would show secrets.
//
// Files: paths under the workdir or /tmp are read and written directly on
// the host, through an os.Root so that ".." and symlinks cannot lead out of
// the sandbox. Everything else (the read-only system, /dev, /proc), and any
// path whose symlinks lead outside those two directories, is stat'ed, listed
// and read from inside the sandbox by a small sh command, so callers see
// exactly what the sandbox sees and never the host's file at that path.
// Only the workdir and /tmp can be written.
package local

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/internal/randhex"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// Backend is the local driver's name.
const Backend = "local"

// Options configure the local driver. The zero value works on a host with
// bubblewrap installed.
type Options struct {
	// Root is where sandbox directories live. Default: DefaultRoot(). It
	// must belong to the worker, be closed to writes by other users
	// (created 0700 when missing) and lie where no other user can replace
	// it; New refuses it otherwise.
	Root string
	// Bwrap is the bubblewrap binary. Default: "bwrap" looked up on PATH.
	Bwrap string
	// Prlimit is the prlimit(1) binary used to enforce MemoryMiB. Default:
	// "prlimit" on PATH; when missing, specs with a memory limit are refused.
	Prlimit string
	// Slirp4netns gives open-network sandboxes their network. Default:
	// "slirp4netns" on PATH; when missing, open-network specs are refused.
	Slirp4netns string
	// DefaultMemoryMiB is the memory limit of a sandbox whose spec sets no
	// memory_mib: DefaultMemoryMiB when 0. The bundle config raises it
	// (backends.local.default_memory_mib).
	DefaultMemoryMiB int
	// DiskMiB bounds what a sandbox's workdir and /tmp hold together:
	// DefaultDiskMiB when 0. The bundle config raises it
	// (backends.local.disk_mib). Each sandbox's filesystem of its own
	// enforces it (disk.go).
	DiskMiB int
	// DiskInodes caps the files and directories that filesystem holds:
	// one per DefaultBytesPerInode of DiskMiB when 0
	// (backends.local.disk_inodes).
	DiskInodes int
	// ShareWorkerNetwork gives open-network sandboxes the worker's own
	// network namespace instead, its loopback services and the cloud
	// metadata address included: the hole issue 19 closed. Only for test
	// emulators of other backends (testing/fakeopensandbox plays a server
	// without an egress sidecar); a worker never sets it.
	ShareWorkerNetwork bool
	// IgnoreImage runs specs that name a registry image (written for Modal or
	// OpenSandbox) on the host's userland instead of refusing them, with a
	// warning. For demos and tests.
	IgnoreImage bool
	// IgnoreCPU runs specs that ask for cpu without limiting it, with a
	// warning, instead of refusing them. For demos of Dags written for
	// Modal; never the default, since a limit must not be dropped silently.
	IgnoreCPU bool
	// ImageRoots are the directories under which an image directory (an
	// unpacked root filesystem given as image) may lie, after resolving
	// symlinks. None by default: then every image directory is refused, so
	// whoever writes a spec cannot mount a host directory such as /usr or
	// /home as a sandbox's root. The operator's setting: the worker reads it
	// from AIRFLOW_GO_WORKER_IMAGE_ROOTS.
	ImageRoots []string
	// MaxProcesses caps the processes and threads of each sandbox (of each
	// command, on an unprivileged worker), so a fork bomb cannot take the
	// host's pids. 0 means
	// DefaultMaxProcesses; negative means no limit (an operator's choice on
	// a host that offers no way to enforce one: a root worker without a
	// writable pids cgroup).
	MaxProcesses int
	// NetworkMemoryMiB bounds the memory of each open-network command's
	// slirp4netns, its socket buffers included (limits.go): 0 means
	// NetworkMemoryEnv's, else DefaultNetworkMemoryMiB.
	NetworkMemoryMiB int
	// Host names this worker host in the ids of the sandboxes it creates
	// (<name>@<host>), so a task on another host that is handed one fails
	// naming both hosts. Default: the host name. The operator's setting:
	// the worker reads it from AIRFLOW_GO_WORKER_HOSTNAME.
	Host   string
	Logger hclog.Logger
}

// Driver implements driver.Driver with bubblewrap.
type Driver struct {
	root     string
	bwrap    string
	prlimit  string
	slirp    string // "": open networks are refused, slirpErr says why
	slirpErr error
	shareNet bool // Options.ShareWorkerNetwork
	// egressAllow are the blocked ranges the operator opens
	// (EgressAllowEnv); egressOff allows open networks without the
	// egress filter where it cannot be installed (EgressFilterEnv=off).
	egressAllow []netip.Prefix
	egressOff   bool
	ignoreImage bool
	ignoreCPU   bool
	host        string // in every id this driver creates
	log         hclog.Logger
	imageRoots  []string // resolved Options.ImageRoots
	// passwd and group replace the host's /etc files in every sandbox.
	passwd, group []byte
	maxProcs      int         // 0 = no process limit
	procs         procLimiter // nil: this host cannot enforce maxProcs
	procsErr      error       // why procs is nil
	// memCgroup limits memory with a cgroup per command (memory set);
	// otherwise prlimit's RLIMIT_AS does, per process.
	memCgroup cgroupLimiter
	memErr    error // why there is no memory cgroup
	// cgroupPrefix begins the names of this driver's per-command cgroups.
	cgroupPrefix string
	// defaultMemMiB and diskMiB are the limits new sandboxes get.
	defaultMemMiB, diskMiB, diskInodes int
	// mkfs formats each sandbox's filesystem; "" when this worker cannot
	// mount one (diskErr says why), and then specs are refused unless
	// diskOff (the operator's DiskLimitEnv=off).
	mkfs    string
	diskErr error
	diskOff bool
	// budget bounds what the live sandboxes under root take together
	// (budget.go).
	budget budgets
	// opts are the options New was given: a detached command's keeper
	// (detached.go) opens its own driver with them.
	opts Options
	// disableUserns: bwrap is new enough (0.8+) for --disable-userns.
	disableUserns bool
	seccomp       []byte // compiled filter for --seccomp; nil = none
	now           func() time.Time
	// beforeStart, when set (by tests), runs after a command's bwrap
	// arguments are built and just before bwrap starts: where a race
	// against the host paths it was given would be won.
	beforeStart func()
	// beforeRelease, when set (by tests), runs on release's goroutine
	// before it lets a destroyed sandbox's filesystem go.
	beforeRelease func()
	// confined, when set (by tests), runs once a command's bwrap init
	// (host pid) is under its limits, before it is let go.
	confined func(pid int)

	// sandboxUser is who a root worker's new sandboxes run as on the
	// host (SandboxUIDEnv; zero: the worker); userns holds the user
	// namespaces their commands join (userns.go).
	sandboxUser ids
	userns      userNamespaces
	// networkMemMiB bounds each open-network command's slirp4netns.
	networkMemMiB int
	// egressUpdated, when set (by tests), is told each address a
	// running command's filter took (addrwatch.go).
	egressUpdated func([]netip.Prefix)

	mu      sync.Mutex
	running map[string]map[*exec.Cmd]*execState // by sandbox name, for Destroy
	closed  bool                                // set by Close: no command starts after it
	// active counts each started command until its run has returned, and
	// the clean-ups (cgroups, slirp4netns) it leaves to run after it;
	// Close waits for them. A command joins it only under mu while the
	// driver is open, and a clean-up only while its command still counts,
	// so nothing is added once Close waits.
	active sync.WaitGroup
	// releases counts destroyed sandboxes whose filesystem and image are
	// still being let go of (release).
	releases sync.WaitGroup
}

var _ driver.Driver = (*Driver)(nil)

// New checks that bubblewrap is available and prepares the root directory.
func New(opts Options) (*Driver, error) {
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	bw := opts.Bwrap
	if bw == "" {
		bw = "bwrap"
	}
	bwPath, err := exec.LookPath(bw)
	if err != nil {
		return nil, fmt.Errorf("local sandbox backend needs bubblewrap, but %q was not found (%v); install it (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap) or set the bwrap path", bw, err)
	}
	plPath, err := exec.LookPath(cmp.Or(opts.Prlimit, "prlimit"))
	if err != nil {
		log.Warn("prlimit not found: where no memory cgroup can be made, every spec will be refused (install util-linux)", "error", err)
		plPath = ""
	}
	slirpPath, slirpErr := exec.LookPath(cmp.Or(opts.Slirp4netns, "slirp4netns"))
	if slirpErr != nil {
		log.Warn("slirp4netns not found: open-network specs will be refused (install slirp4netns to allow them)", "error", slirpErr)
	}
	root, err := rootFor(opts.Root)
	if err != nil {
		return nil, err
	}
	host := opts.Host
	if host == "" {
		if host, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("local sandbox backend: cannot learn this host's name (%v); set AIRFLOW_GO_WORKER_HOSTNAME", err)
		}
	}
	if !validHost(host) {
		return nil, fmt.Errorf("local sandbox backend: the host name %q cannot stand in a sandbox id; set AIRFLOW_GO_WORKER_HOSTNAME to a name of letters, digits, '.', '-' and '_'", host)
	}
	d := &Driver{
		root: root, bwrap: bwPath, prlimit: plPath, slirp: slirpPath, slirpErr: slirpErr, shareNet: opts.ShareWorkerNetwork, ignoreImage: opts.IgnoreImage, ignoreCPU: opts.IgnoreCPU, host: host,
		log: log, now: time.Now, running: map[string]map[*exec.Cmd]*execState{},
		seccomp: seccompProgram(), opts: opts,
	}
	d.passwd, d.group = systemFiles(os.Getuid(), os.Getgid())
	for _, r := range opts.ImageRoots {
		real, err := filepath.EvalSymlinks(r)
		if !filepath.IsAbs(r) || err != nil {
			return nil, fmt.Errorf("image root %q is not an existing absolute directory (%v); fix or remove it in the image roots (AIRFLOW_GO_WORKER_IMAGE_ROOTS)", r, err)
		}
		d.imageRoots = append(d.imageRoots, real)
	}
	if d.seccomp == nil {
		log.Warn("no seccomp filter for this architecture; sandboxes rely on namespaces and dropped capabilities alone")
	}
	if d.egressAllow, err = egressAllowFromEnv(); err != nil {
		return nil, err
	}
	if d.egressOff, err = egressFilterOff(); err != nil {
		return nil, err
	}
	if d.networkMemMiB, err = networkMemoryMiB(opts.NetworkMemoryMiB); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		if d.sandboxUser, err = sandboxIDsFromEnv(); err != nil {
			return nil, err
		}
		if !d.sandboxUser.set() {
			log.Warn("local sandboxes run as root on the host (" + SandboxUIDEnv + "=off): a sandbox can exhaust root's per-user kernel limits")
		}
	}
	if err := d.setUpLimits(opts); err != nil {
		return nil, err
	}
	if err := d.probe(); err != nil {
		return nil, err
	}
	return d, nil
}

// setUpLimits settles the limits of the sandboxes this driver makes and
// how it enforces them, its budgets, and clears what dead workers left.
func (d *Driver) setUpLimits(opts Options) error {
	var err error
	switch d.maxProcs = opts.MaxProcesses; {
	case d.maxProcs == 0:
		d.maxProcs = DefaultMaxProcesses
	case d.maxProcs < 0:
		d.maxProcs = 0
		d.log.Warn("local sandboxes run without a process limit (MaxProcesses < 0): a fork bomb can exhaust the host's pids")
	}
	if d.defaultMemMiB, d.diskMiB = opts.DefaultMemoryMiB, opts.DiskMiB; d.defaultMemMiB <= 0 {
		d.defaultMemMiB = DefaultMemoryMiB
	}
	if d.diskMiB <= 0 {
		d.diskMiB = DefaultDiskMiB
	}
	d.diskInodes = inodesFor(d.diskMiB, opts.DiskInodes)
	if d.diskOff, err = diskLimitOff(); err != nil {
		return err
	}
	if d.mkfs, d.diskErr = diskSupport(); d.diskErr != nil && d.diskOff {
		d.log.Warn("local sandboxes run without a disk limit (" + DiskLimitEnv + "=off): a command can fill the worker's disk")
	}
	if d.budget, err = budgetsFromEnv(); err != nil {
		return err
	}
	d.cgroupPrefix = driverCgroupPrefix(d.root)
	if parent, version, err := ownCgroupFor("memory"); err == nil {
		d.memCgroup = cgroupLimiter{version: version, memory: parent, prefix: d.cgroupPrefix}
	} else {
		d.memErr = err
		d.log.Debug("no memory cgroup: memory limits are per process (RLIMIT_AS)", "reason", err)
	}
	if d.maxProcs > 0 {
		d.procs, d.procsErr = procLimiterFor(d.cgroupPrefix)
		if _, ok := d.procs.(rlimitProcs); ok && !kernelAtLeast(5, 14) {
			d.log.Warn("this kernel (before 5.14) counts RLIMIT_NPROC across all of the worker user's processes, not per sandbox: commands may fail to fork when the user runs many processes", "max_processes", d.maxProcs)
		}
	}
	d.removeDeadWorkers()
	return nil
}

// probe learns bubblewrap's version and checks that it can create the
// namespaces every command needs, so a host without user namespaces fails
// here with advice rather than at the first command.
func (d *Driver) probe() error {
	out, err := exec.Command(d.bwrap, "--version").Output()
	if err != nil {
		return fmt.Errorf("%s --version failed (%v); reinstall bubblewrap (apt-get install bubblewrap)", d.bwrap, err)
	}
	var major, minor int
	// A version it cannot read counts as old: the checks below refuse then.
	_, _ = fmt.Sscanf(strings.TrimPrefix(strings.TrimSpace(string(out)), "bubblewrap "), "%d.%d", &major, &minor)
	// --disable-userns arrived in 0.8; older versions still isolate, only
	// without forbidding nested user namespaces.
	d.disableUserns = major > 0 || minor >= 8
	if !d.disableUserns {
		d.log.Warn("bubblewrap is older than 0.8: sandboxed commands may create nested user namespaces", "version", strings.TrimSpace(string(out)))
	}
	// The host's system directories, as a command sees them, not all of
	// /: binding / recursively remounts every mount under it, and another
	// sandbox's filesystem unmounted meanwhile failed the probe.
	args := []string{"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net"}
	for _, p := range hostSystemDirs {
		var err error
		if args, err = mountEntry(args, p, p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("cannot read the host's %s for the sandboxes: %v", p, err)
		}
	}
	var stderr strings.Builder
	cmd := exec.Command(d.bwrap, append(args, "--proc", "/proc", "--", "true")...)
	cmd.Env = []string{"PATH=" + defaultPath}
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("bubblewrap cannot create the namespaces a sandbox needs (%v: %s); enable unprivileged user namespaces "+
			"(sysctl kernel.unprivileged_userns_clone=1, or on Ubuntu 24.04+ kernel.apparmor_restrict_unprivileged_userns=0), "+
			"or run the worker in a container allowed to create them (e.g. docker run --security-opt seccomp=unconfined --security-opt apparmor=unconfined)",
			err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// Backend returns "local".
func (d *Driver) Backend() string { return Backend }

// Capabilities: memory (through prlimit), a blocked or a private open network,
// CIDR allowlists (the egress filter, egress.go), tags and listing; cpu
// only when configured to ignore it. No GPUs, no host allowlists (an
// address filter cannot follow names), and no server-side
// lifetime: an expired sandbox refuses commands and is removed by sweep (the
// maintenance Dag routed to this host, or the sweep command), but nothing
// ends it on its own.
// An open network needs slirp4netns on this host: without it the driver
// does not offer one, and says how to get it.
func (d *Driver) Capabilities() driver.Capabilities {
	c := capabilities(d.ignoreCPU)
	switch {
	case d.shareNet:
		c.AllowCIDRs = false
		c.Hints[driver.CapAllowCIDRs] = "this driver shares the worker's network with open sandboxes (a test emulator's setting), where nothing filters traffic"
	case d.slirp == "":
		c.OpenNetwork, c.AllowCIDRs = false, false
		c.Hints[driver.CapOpenNetwork] = noNetworkHelper(d.slirpErr)
		c.Hints[driver.CapAllowCIDRs] = noNetworkHelper(d.slirpErr)
	default:
		if err := d.egressSupport(); err != nil {
			c.AllowCIDRs = false
			c.Hints[driver.CapAllowCIDRs] = noEgressFilter(err)
			if !d.egressOff {
				c.OpenNetwork = false
				c.Hints[driver.CapOpenNetwork] = noEgressFilter(err)
			}
		}
	}
	return c
}

func capabilities(ignoreCPU bool) driver.Capabilities {
	return driver.Capabilities{CPU: ignoreCPU, Memory: true, BlockNetwork: true, OpenNetwork: true, AllowCIDRs: true, Tags: true, List: true,
		Hints: map[driver.Capability]string{
			driver.CapCPU:        "bubblewrap cannot limit cpu; leave cpu unset for local runs, or set the local option ignore_cpu to run without a limit",
			driver.CapAllowHosts: "the local backend filters a sandbox's traffic by address only, and a host's addresses are whatever DNS answers, so a host allowlist cannot be enforced; list the hosts' addresses in allow_cidrs, or use block: false for an open network",
		}}
}

// As gives the concrete driver (target *(*local.Driver)), for Root and
// RemoveExpired.
func (d *Driver) As(target any) bool {
	if p, ok := target.(**Driver); ok {
		*p = d
		return true
	}
	return false
}

// Root is the directory that holds the sandboxes.
func (d *Driver) Root() string { return d.root }

// Close kills commands still running and returns once they have returned
// and cleaned up; sandboxes stay on disk. Commands asked for afterwards
// are refused.
func (d *Driver) Close() error {
	d.mu.Lock()
	d.closed = true
	for _, cmds := range d.running {
		for _, st := range cmds {
			st.kill()
		}
	}
	d.mu.Unlock()
	d.active.Wait()
	d.releases.Wait()
	d.unmountAll()
	d.closeUserNamespaces()
	return nil
}

// errClosed refuses a command on a closed driver.
var errClosed = errors.New("the local sandbox driver is closed (the worker is shutting down), so no command starts; run it from a task whose backend is open")

// Create refuses what this host cannot enforce, then builds the sandbox
// directory under a temporary name and renames it into place, so a failed
// create leaves nothing behind and a sandbox is either complete or absent.
// What the spec asks beyond the capabilities and the static rules the
// portable layer has refused already; a direct caller of the driver (the
// test emulators back Modal's and OpenSandbox's APIs with it) gets the same
// refusal from CheckUnstamped.
func (d *Driver) Create(ctx context.Context, name string, spec driver.Spec) (driver.Info, error) {
	spec = spec.WithDefaults() // for direct callers; the portable layer's spec has them
	if err := driver.CheckUnstamped(d, name, spec); err != nil {
		return driver.Info{}, err
	}
	rootfs, err := d.checkHost(spec)
	if err != nil {
		return driver.Info{}, err
	}
	if strings.Contains(name, "@") {
		return driver.Info{}, &driver.Error{Op: "create", Sandbox: name, Kind: driver.ErrRefused, Err: fmt.Errorf("%q is not a sandbox name: it holds @", name)}
	}
	dir, err := d.dir("create", name)
	if err != nil {
		return driver.Info{}, &driver.Error{Op: "create", Sandbox: name, Kind: driver.ErrRefused, Err: err}
	}
	if err := ctx.Err(); err != nil {
		return driver.Info{}, &driver.Error{Op: "create", Sandbox: name, Err: err}
	}
	d.removeDeadWorkers()
	// Fixed at creation, by whoever configured the creating task.
	lim := &limits{MemoryMiB: cmp.Or(spec.MemoryMiB, d.defaultMemMiB), DiskMiB: d.diskMiB,
		DiskInodes: d.diskInodes, DiskImage: d.mkfs != "", Sandbox: d.sandboxUser, MaxProcesses: d.maxProcs}
	staging, err := d.reserve(name, *lim)
	if se := (*driver.Error)(nil); errors.As(err, &se) {
		se.Sandbox = name // refused for good (budget.go)
		return driver.Info{}, se
	} else if err != nil {
		return driver.Info{}, &driver.Error{Op: "create", Sandbox: name, Err: err}
	}
	m := d.newMeta(name, spec, rootfs, lim)
	if err := d.build(staging, dir, m); err != nil {
		_ = unmountDisk(staging) // a mount left makes RemoveAll fail; the sweep retries
		os.RemoveAll(staging)
		return driver.Info{}, &driver.Error{Op: "create", Sandbox: name, Err: err}
	}
	d.log.Debug("created local sandbox", "sandbox", name, "dir", dir, "expires_at", m.ExpiresAt)
	return m.info(), nil
}

// newMeta describes a new sandbox: its spec, limits and tags, the
// ownership tags' with this host's added.
func (d *Driver) newMeta(name string, spec driver.Spec, rootfs string, lim *limits) *meta {
	now := d.now()
	m := &meta{
		Name: name, Spec: spec, Rootfs: rootfs, Tags: cloneTags(spec.Tags), Host: d.host,
		CreatedAt: now.UTC(), ExpiresAt: now.Add(spec.Lifetime).UTC(), Limits: lim,
	}
	if m.Tags == nil {
		m.Tags = map[string]string{}
	}
	m.Tags[driver.TagHost] = d.host
	// The ownership tag computed the expiry first; keep both clocks equal.
	if exp := driver.ExpiresAt(spec.Tags); !exp.IsZero() {
		m.ExpiresAt = exp.UTC()
	}
	m.Spec.Tags = nil // the live tags are m.Tags
	return m
}

// build makes sandbox m in its reserved directory staging (its user
// namespaces, its own disk, its workdir and /tmp, its metadata) and moves
// it into place at dir.
func (d *Driver) build(staging, dir string, m *meta) error {
	if d.sandboxUser.set() { // made here, its failure refuses the spec, not a command
		if _, err := d.userNamespaces(d.sandboxUser); err != nil {
			return err
		}
	}
	if ownDisk(m) {
		if err := d.makeDisk(staging, *m.Limits); err != nil {
			return err
		}
	}
	for _, sub := range []string{workDir, tmpDir} {
		area := d.hostArea(m, staging, sub)
		if err := os.Mkdir(area, 0o755); err != nil {
			return err
		}
		if m.Limits.Sandbox.set() {
			if err := os.Lchown(area, m.Limits.Sandbox.UID, m.Limits.Sandbox.GID); err != nil {
				return err
			}
		}
	}
	// /tmp is world-writable with the sticky bit, as programs expect. Go's
	// sticky bit is os.ModeSticky: the octal 0o1777 would drop it.
	if err := os.Chmod(d.hostArea(m, staging, tmpDir), os.ModeSticky|0o777); err != nil {
		return err
	}
	if err := writeMeta(staging, m); err != nil {
		return err
	}
	return d.moveIntoPlace(staging, dir)
}

// moveIntoPlace renames a finished sandbox from staging to dir, under the
// budget lock: a ledger never lists the root mid-rename, where it could
// miss both names.
func (d *Driver) moveIntoPlace(staging, dir string) error {
	unlock, err := d.lockBudget()
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.Rename(staging, dir); err != nil {
		return fmt.Errorf("a sandbox named %s may already exist: %v", filepath.Base(dir), err)
	}
	os.Remove(filepath.Join(dir, reservationFile)) // its meta.json counts now
	return nil
}

// noProcLimit says why this host cannot cap a sandbox's processes.
func (d *Driver) noProcLimit() error {
	return fmt.Errorf("processes: the local backend cannot limit the number of processes here: the worker runs as root, for whom the kernel ignores RLIMIT_NPROC, and no writable pids cgroup is available (%v); run the worker as a non-root user (recommended), give it a delegated pids cgroup, or have the operator turn the limit off (AIRFLOW_GO_WORKER_LOCAL_MAX_PROCESSES=-1)", d.procsErr)
}

// systemDirs may not hold the workdir: they are mounted read-only (or are
// kernel filesystems), so bubblewrap could not mount the workdir there.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/dev", "/sys"}

// checkHost refuses what this host cannot enforce: what no capability
// and no static rule says (its limits, an image directory). It returns the
// host directory to use as the root filesystem ("" = the host's userland).
func (d *Driver) checkHost(spec driver.Spec) (string, error) {
	if spec.CPU > 0 { // only with ignore_cpu, which the capabilities require
		d.log.Warn("local backend cannot limit cpu; running without a cpu limit", "cpu", spec.CPU)
	}
	// What no capability says: this host's limits, the workdir, the image.
	var errs []string
	if d.maxProcs > 0 && d.procs == nil {
		errs = append(errs, d.noProcLimit().Error())
	}
	if d.mkfs == "" && !d.diskOff {
		errs = append(errs, d.noDiskLimit().Error())
	}
	if d.memCgroup.memory == "" && d.prlimit == "" {
		errs = append(errs, fmt.Sprintf("memory: every local sandbox has a memory limit (memory_mib, else %d MiB), and this worker can enforce none: it may not make memory cgroups (%v) and prlimit(1) is not installed; install util-linux", d.defaultMemMiB, d.memErr))
	}
	wd := spec.Workdir
	rootfs := ""
	switch img := spec.Image; {
	case img == "":
	case filepath.IsAbs(img):
		real, msg := d.checkImageDir(img, wd)
		if msg != "" {
			errs = append(errs, msg)
		}
		rootfs = real
	case d.ignoreImage:
		d.log.Warn("local backend cannot pull images; running on the host's userland instead", "image", img)
	}
	if len(errs) > 0 {
		return "", driver.Refused("the local backend refuses this spec: %s", strings.Join(errs, "; "))
	}
	return rootfs, nil
}

// checkImageDir vets an image directory and returns it resolved, or says
// why it is refused: it must lie under an operator-configured image root,
// must not show the sandbox the host itself or the sandboxes' directory
// (where other sandboxes' files and env live), and must be safe from other
// host users (openImage).
func (d *Driver) checkImageDir(img, wd string) (string, string) {
	real, err := filepath.EvalSymlinks(img)
	if err == nil {
		var st fs.FileInfo
		if st, err = os.Stat(real); err == nil && !st.IsDir() {
			err = errors.New("not a directory")
		}
	}
	if err != nil {
		return "", fmt.Sprintf("image: %q is not a directory on this host (%v); the local backend takes an unpacked root filesystem directory, or no image for the host's userland", img, err)
	}
	if real == "/" {
		return "", "image: \"/\" is the host itself; leave image empty to run on the host's userland (read-only system directories only)"
	}
	allowed := false
	for _, r := range d.imageRoots {
		allowed = allowed || within(real, r)
	}
	switch {
	case len(d.imageRoots) == 0:
		return "", fmt.Sprintf("image: %q is a host directory, and this worker allows no image directories (a spec could otherwise mount any host directory as a sandbox's root); leave image empty to run on the host's userland, or have the operator list the directories holding unpacked root filesystems in AIRFLOW_GO_WORKER_IMAGE_ROOTS (colon-separated)", img)
	case !allowed:
		return "", fmt.Sprintf("image: %q (%s) is not under the image roots this worker allows (%s); unpack the root filesystem under one of them, or have the operator add its directory to AIRFLOW_GO_WORKER_IMAGE_ROOTS", img, real, strings.Join(d.imageRoots, ":"))
	}
	if within(d.root, real) {
		return "", fmt.Sprintf("image: %q contains the sandboxes' directory %s, so a sandbox would see the others; unpack the root filesystem elsewhere", img, d.root)
	}
	if within(real, d.root) {
		return "", fmt.Sprintf("image: %q lies inside the sandboxes' directory %s, where another sandbox's files and env live; unpack the root filesystem elsewhere", img, d.root)
	}
	// Open and check every entry as a command would.
	var fds fdList
	_, err = mountImage(nil, real, &fds)
	fds.close()
	if err != nil {
		return "", err.Error()
	}
	if msg := workdirFitsRootfs(real, wd); msg != "" {
		return "", msg
	}
	return real, ""
}

// workdirFitsRootfs: the rootfs's top-level entries are mounted read-only,
// so the workdir's mount point must already exist when it lies inside one.
func workdirFitsRootfs(rootfs, wd string) string {
	top := strings.SplitN(strings.TrimPrefix(wd, "/"), "/", 2)[0]
	if _, err := os.Lstat(filepath.Join(rootfs, top)); err != nil {
		return "" // bubblewrap creates it on its own root
	}
	if st, err := os.Stat(filepath.Join(rootfs, filepath.FromSlash(wd))); err == nil && st.IsDir() {
		return ""
	}
	return fmt.Sprintf("workdir: %q does not exist in the image %s, whose %s is read-only; create it in the image or choose a new top-level directory such as /workspace", wd, rootfs, path.Join("/", top))
}

// Info describes a sandbox; an expired one is still described (ExpiresAt in
// the past) so sweeping can find it.
func (d *Driver) Info(ctx context.Context, id string) (driver.Info, error) {
	m, _, err := d.readMeta("info", id)
	if err != nil {
		return driver.Info{}, err
	}
	return m.info(), nil
}

// Tags returns the sandbox's tags.
func (d *Driver) Tags(ctx context.Context, id string) (map[string]string, error) {
	m, _, err := d.readMeta("read tags", id)
	if err != nil {
		return nil, err
	}
	return cloneTags(m.Tags), nil
}

// SetTags replaces the sandbox's tags.
func (d *Driver) SetTags(ctx context.Context, id string, tags map[string]string) error {
	d.mu.Lock() // read-modify-write of meta.json
	defer d.mu.Unlock()
	m, dir, err := d.readMeta("set tags", id)
	if err != nil {
		return err
	}
	m.Tags = cloneTags(tags)
	if err := writeMeta(dir, m); err != nil {
		return &driver.Error{Op: "set tags", Sandbox: id, Err: err}
	}
	return nil
}

// ListSandboxes lists sandboxes whose tags include every pair in match,
// expired ones included.
func (d *Driver) ListSandboxes(ctx context.Context, match map[string]string) ([]driver.Info, error) {
	entries, err := os.ReadDir(d.root)
	if err != nil {
		return nil, &driver.Error{Op: "list sandboxes", Err: err}
	}
	var out []driver.Info
	for _, e := range entries {
		if !e.IsDir() || !validName(e.Name()) {
			continue
		}
		m, _, err := d.readMeta("list sandboxes", e.Name())
		if err != nil {
			if !errors.Is(err, driver.ErrGone) {
				d.log.Warn("skipping unreadable sandbox", "sandbox", e.Name(), "error", err)
			}
			continue
		}
		if matches(m.Tags, match) {
			out = append(out, m.info())
		}
	}
	return out, nil
}

func matches(tags, match map[string]string) bool {
	for k, v := range match {
		if got, ok := tags[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// RemoveExpired destroys every sandbox past its expiry and returns their
// ids. It also clears what a crash mid-create or mid-destroy left behind,
// and what killed workers left mounted or in cgroups.
func (d *Driver) RemoveExpired(ctx context.Context) ([]string, error) {
	d.removeDeadWorkers()
	d.removeLeftovers()
	all, err := d.ListSandboxes(ctx, nil)
	if err != nil {
		return nil, err
	}
	var removed []string
	now := d.now()
	for _, info := range all {
		if info.ExpiresAt.IsZero() || now.Before(info.ExpiresAt) {
			continue
		}
		if err := d.Destroy(ctx, info.ID); err != nil {
			return removed, err
		}
		removed = append(removed, info.ID)
	}
	return removed, nil
}

// staleCreate is how old a half-created sandbox directory must be before it
// is taken for the leftover of a crash, not a create in progress.
const staleCreate = time.Hour

func (d *Driver) removeLeftovers() {
	entries, err := os.ReadDir(d.root)
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join(d.root, e.Name())
		switch {
		case strings.HasPrefix(e.Name(), ".trash-"):
		case strings.HasPrefix(e.Name(), ".creating-"):
			if st, err := e.Info(); err != nil || d.now().Sub(st.ModTime()) < staleCreate {
				continue
			}
		default:
			continue
		}
		if err := errors.Join(unmountDisk(p), forceRemoveAll(p)); err != nil {
			d.log.Warn("cannot remove a leftover sandbox directory", "dir", p, "error", err)
		}
	}
}

// Destroy kills the sandbox's running commands and removes its directory.
// It moves the directory aside first so the sandbox vanishes at once even if
// deleting a large tree takes a while. A missing sandbox is not an error.
func (d *Driver) Destroy(ctx context.Context, id string) error {
	dir, err := d.dir("destroy", id)
	if errors.Is(err, driver.ErrOtherHost) {
		return err // it is not here to destroy: say where it is
	}
	if err != nil {
		return nil // such a name never was a sandbox
	}
	name := filepath.Base(dir)
	d.mu.Lock()
	for _, st := range d.running[name] {
		st.lost = true
		st.kill()
	}
	trash := filepath.Join(d.root, ".trash-"+name+"-"+randhex.String(4))
	err = os.Rename(dir, trash)
	d.mu.Unlock()
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return &driver.Error{Op: "destroy", Sandbox: id, Err: err}
	}
	held := holdDisk(trash)
	err = errors.Join(unmountDisk(trash), forceRemoveAll(trash))
	d.release(held)
	if err != nil {
		return &driver.Error{Op: "destroy", Sandbox: id, Err: fmt.Errorf("sandbox is gone but %s could not be fully removed: %v", trash, err)}
	}
	d.log.Debug("destroyed local sandbox", "sandbox", id)
	return nil
}

// release closes, on another goroutine, what holdDisk opened for a
// destroyed sandbox: the last close tears its filesystem down and frees
// its image's blocks, which Destroy need not wait for. Close does.
func (d *Driver) release(held []int) {
	closeAll := func() {
		for _, fd := range held {
			_ = syscall.Close(fd) // a failed close still lets go of it
		}
	}
	d.mu.Lock()
	closed := d.closed
	if !closed {
		d.releases.Add(1)
	}
	d.mu.Unlock()
	if closed {
		closeAll()
		return
	}
	go func() {
		defer d.releases.Done()
		if d.beforeRelease != nil {
			d.beforeRelease()
		}
		closeAll()
	}()
}

// forceRemoveAll removes a tree even where a command left directories
// without write or search permission. The chmods go through an os.Root, so
// a symlink a sandbox planted can never point them at a host directory.
func forceRemoveAll(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	if root, err := os.OpenRoot(dir); err == nil {
		// Best effort: what stays closed fails the removal below, which says so.
		_ = fs.WalkDir(root.FS(), ".", func(p string, e fs.DirEntry, err error) error {
			if e != nil && e.IsDir() {
				_ = root.Chmod(p, 0o700)
			}
			return nil
		})
		root.Close()
	}
	return os.RemoveAll(dir)
}

// systemFiles are the /etc/passwd and /etc/group every sandbox gets in
// place of the host's, which would leak its users. They are handed to
// bubblewrap as data, never as host files: a file another user could swap
// (a shared root's .system directory once was) would be read by bubblewrap
// with the worker's rights.
func systemFiles(uid, gid int) (passwd, group []byte) {
	p := "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	g := "root:x:0:\nnogroup:x:65534:\n"
	if uid != 0 {
		p += fmt.Sprintf("sandbox:x:%d:%d:sandbox:/tmp:/bin/sh\n", uid, gid)
	}
	if gid != 0 {
		g += fmt.Sprintf("sandbox:x:%d:\n", gid)
	}
	return []byte(p), []byte(g)
}

// sandboxHosts is /etc/hosts in a sandbox without network.
const sandboxHosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"

// execState tracks one running command so Destroy and timeouts can kill it.
type execState struct {
	cmd  *exec.Cmd
	lost bool // set under Driver.mu by Destroy

	mu     sync.Mutex
	killed bool
	init   *initExit // bwrap's init, once confine knows it
}

// kill ends the whole process tree: the process group of the outer bwrap
// (and its init, while that has not left it: --new-session), and the
// init, once it is known (watch), whose death ends every process in its
// pid namespace, background children included, whatever uid they run
// as. Killing bwrap alone is not enough: its init asks for its
// parent-death signal (--die-with-parent) only after it has left the
// process group and forked the command, and an init that missed it ran
// on, the command with it.
func (s *execState) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.killed {
		return
	}
	s.killed = true
	if s.cmd.Process != nil {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	}
	if s.init != nil {
		s.init.kill()
	}
}

// watch makes kill reach init, bwrap's init, from now on: it is known
// while it still waits on its block fd, before it leaves the process
// group. A command killed before is killed again, through it.
func (s *execState) watch(init *initExit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init = init
	if s.killed {
		init.kill()
	}
}
