package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airflow-sandbox/airflow-go-worker/internal/tailbuf"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// defaultPath is PATH inside a sandbox unless the spec's env sets one.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// hostSystemDirs are mounted read-only from the host when no rootfs is given.
var hostSystemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// hostEtc is the part of the host's /etc a sandbox sees: what the dynamic
// linker, the shell, TLS and the alternatives system need, and nothing that
// names the host's users or secrets. passwd, group and hosts are generated.
// Only ssl/certs and openssl.cnf of /etc/ssl: its private/ holds the host's
// TLS keys, which a worker running as root could otherwise read.
var hostEtc = []string{
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "nsswitch.conf",
	"localtime", "timezone", "ssl/certs", "ssl/openssl.cnf", "ca-certificates", "ca-certificates.conf",
	"mime.types", "protocols", "services",
}

// hostEtcNetwork is added when the sandbox has an open network, so that
// name resolution works as on the host; resolv.conf is generated
// (sandboxResolvConf).
var hostEtcNetwork = []string{"hosts", "host.conf", "gai.conf"}

// fdList collects the files bwrap inherits through exec.Cmd.ExtraFiles:
// the i-th is fd 3+i in bwrap.
type fdList []*os.File

// add passes f and returns its fd number in bwrap.
func (l *fdList) add(f *os.File) string {
	*l = append(*l, f)
	return strconv.Itoa(2 + len(*l))
}

// addData passes data as a pipe, written whole and closed before bwrap
// starts: only for data smaller than a pipe's buffer (64 KiB).
func (l *fdList) addData(data []byte) (string, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	_, err = w.Write(data)
	w.Close()
	if err != nil {
		r.Close()
		return "", err
	}
	return l.add(r), nil
}

func (l fdList) close() {
	for _, f := range l {
		f.Close()
	}
}

// bwrapArgs builds bubblewrap's arguments for one command in sandbox m;
// the files they name by fd are added to fds.
// userns are its user namespace's arguments (usernsArgs).
func (d *Driver) bwrapArgs(m *meta, dir, cwd string, argv, userns []string, fds *fdList) ([]string, error) {
	args := append(userns,
		"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--cap-drop", "ALL",
		"--die-with-parent", "--new-session",
		"--hostname", "sandbox",
	)
	if d.seccomp != nil {
		fd, err := fds.addData(d.seccomp)
		if err != nil {
			return nil, err
		}
		args = append(args, "--seccomp", fd)
	}
	// A network namespace of its own: an open one is connected by
	// slirp4netns once bwrap has made it (Driver.confine).
	open := m.Spec.NetworkPolicy().Open
	if !open || !d.shareNet {
		args = append(args, "--unshare-net")
	}
	var err error
	if m.Rootfs != "" {
		args, err = d.imageRootArgs(args, m.Rootfs, open, fds)
	} else {
		args, err = d.hostRootArgs(args, open, fds)
	}
	if err != nil {
		return nil, err
	}
	args = append(args, d.sandboxMountArgs(m, dir, cwd)...)
	return append(args, argv...), nil
}

// roData appends the arguments that pass data, a small generated file,
// read-only at dest.
func roData(args []string, fds *fdList, data []byte, dest string) ([]string, error) {
	fd, err := fds.addData(data)
	return append(args, "--ro-bind-data", fd, dest), err
}

// imageRootArgs appends the mounts of image directory rootfs as the
// sandbox's root.
func (d *Driver) imageRootArgs(args []string, rootfs string, open bool, fds *fdList) ([]string, error) {
	args, err := mountImage(args, rootfs, fds)
	if err != nil {
		return nil, err
	}
	// The image's resolver names an address slirp4netns does not relay;
	// where it has a resolv.conf to mount over, use slirp's.
	if st, err := os.Lstat(filepath.Join(rootfs, "etc", "resolv.conf")); open && !d.shareNet && err == nil && st.Mode().IsRegular() {
		return roData(args, fds, sandboxResolvConf(nil), "/etc/resolv.conf")
	}
	return args, nil
}

// hostRootArgs appends the host's system directories, read-only, and
// what the sandbox sees of its /etc.
func (d *Driver) hostRootArgs(args []string, open bool, fds *fdList) ([]string, error) {
	for _, p := range hostSystemDirs {
		var err error
		if args, err = mountEntry(args, p, p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	for _, name := range hostEtc {
		args = append(args, "--ro-bind-try", "/etc/"+name, "/etc/"+name)
	}
	args, err := roData(args, fds, d.passwd, "/etc/passwd")
	if err == nil {
		args, err = roData(args, fds, d.group, "/etc/group")
	}
	if err != nil {
		return nil, err
	}
	if !open {
		return roData(args, fds, []byte(sandboxHosts), "/etc/hosts")
	}
	for _, name := range hostEtcNetwork {
		args = append(args, "--ro-bind-try", "/etc/"+name, "/etc/"+name)
	}
	if d.shareNet {
		return append(args, "--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"), nil
	}
	hostResolv, _ := os.ReadFile("/etc/resolv.conf")
	return roData(args, fds, sandboxResolvConf(hostResolv), "/etc/resolv.conf")
}

// sandboxMountArgs are the mounts every sandbox gets over its root (its
// own /proc, /dev, /dev/shm, /tmp and workdir), and where the command
// starts: cwd.
func (d *Driver) sandboxMountArgs(m *meta, dir, cwd string) []string {
	return []string{
		"--proc", "/proc",
		// bubblewrap leaves /proc/sys of the new proc writable here, and
		// sysctl writes are checked against uid 0 alone: a worker running
		// as root (as in most containers) gave every sandbox the host's
		// sysctls (kernel.core_pattern = host code execution). The host's
		// own /proc/sys, read-only, covers it; sysrq-trigger likewise.
		"--ro-bind", "/proc/sys", "/proc/sys",
		"--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger",
		"--dev", "/dev",
		// /dev/shm is a directory of the /dev tmpfs, and bubblewrap's own
		// root is a tmpfs too: neither has a size, and neither counts
		// against RLIMIT_AS, so writing there took host memory without
		// bound. / and /dev are made read-only below; /dev/shm gets a tmpfs
		// of its own, no larger than the memory limit.
		"--size", strconv.FormatInt(shmBytes(m.Spec), 10), "--perms", "1777", "--tmpfs", "/dev/shm",
		"--bind", d.hostArea(m, dir, tmpDir), "/tmp", // before the workdir, which may lie under /tmp
		"--bind", d.hostArea(m, dir, workDir), m.Spec.Workdir,
		// Last: every mount point exists by now.
		"--remount-ro", "/", "--remount-ro", "/dev",
		"--chdir", cwd,
		"--",
	}
}

// defaultShmMiB sizes /dev/shm when the spec sets no memory limit, as
// Docker does.
const defaultShmMiB = 64

// shmBytes is the size of a sandbox's /dev/shm: its memory limit when it has
// one, so the only writable tmpfs stays within memory_mib.
func shmBytes(spec driver.Spec) int64 {
	if spec.MemoryMiB > 0 {
		return int64(spec.MemoryMiB) << 20
	}
	return defaultShmMiB << 20
}

// openImage opens image directory rootfs (already resolved) without
// following a symlink anywhere on its path, and refuses it when another host
// user could change it: its owner, or anyone with write access to it, could
// otherwise swap an entry for a symlink to a host path between our check
// and bubblewrap's mount, which bubblewrap would follow with the worker's
// rights.
func openImage(rootfs string) (*os.File, error) {
	f, err := openDirNoFollow(rootfs)
	if err != nil {
		return nil, fmt.Errorf("image: cannot open the image directory: %v", err)
	}
	st, err := f.Stat()
	if err == nil {
		err = checkControlled("image: the image directory", rootfs, st)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// mountImage mounts the top-level entries of image directory rootfs
// read-only, each through a file descriptor opened without following
// symlinks: bubblewrap binds exactly what was checked, whatever has been
// renamed or replaced since. Symlinks are recreated as symlinks (resolved
// inside the sandbox); devices, fifos and sockets are left out.
func mountImage(args []string, rootfs string, fds *fdList) ([]string, error) {
	dir, err := openImage(rootfs)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("cannot read the image directory %s: %v", rootfs, err)
	}
	sort.Strings(names)
	for _, name := range names {
		switch name {
		case "proc", "dev", "sys", "tmp":
			continue // provided fresh
		}
		p := filepath.Join(rootfs, name)
		fd, err := unix.Openat(int(dir.Fd()), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			continue // removed since it was listed
		}
		if err != nil {
			return nil, fmt.Errorf("cannot open %s: %v", p, err)
		}
		f := os.NewFile(uintptr(fd), p)
		st, err := f.Stat()
		switch {
		case err != nil:
		case st.Mode()&fs.ModeSymlink != 0:
			var target string
			if target, err = readlinkFd(fd); err == nil {
				args = append(args, "--symlink", target, "/"+name)
			}
		case st.IsDir() || st.Mode().IsRegular():
			if err = checkControlled("image: the entry", p, st); err == nil {
				args = append(args, "--ro-bind-fd", fds.add(f), "/"+name)
				continue // fds owns f now
			}
		}
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	return args, nil
}

// readlinkFd reads the target of the symlink that O_PATH|O_NOFOLLOW fd is.
func readlinkFd(fd int) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(fd, "", buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// mountEntry mounts host path src read-only at dest, recreating a symlink as
// a symlink: following it on the host could bind a host path the image
// never meant (an absolute link such as /lib64 -> /usr/lib64).
func mountEntry(args []string, src, dest string) ([]string, error) {
	st, err := os.Lstat(src)
	if err != nil {
		return args, err
	}
	if st.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(src)
		if err != nil {
			return args, err
		}
		return append(args, "--symlink", target, dest), nil
	}
	return append(args, "--ro-bind", src, dest), nil
}

// envArgs is the command's whole environment, as NUL-separated bwrap
// arguments (--clearenv, then --setenv K V each) for --args. Passing it this
// way keeps secrets off bwrap's command line, which every host user can
// read, and out of the environment of bwrap and prlimit themselves, which
// run unsandboxed: LD_PRELOAD or LD_LIBRARY_PATH from a spec must never
// load host libraries into them.
//
// A NUL inside a name or value would end that argument early and make the
// rest of it bwrap options of the caller's choosing (--bind / /host): such
// an environment is refused, as is a name bwrap cannot set.
func envArgs(m *meta, extra map[string]string) ([]byte, error) {
	env := map[string]string{"PATH": defaultPath, "HOME": m.Spec.Workdir, "LANG": "C.UTF-8"}
	for k, v := range m.Spec.Env {
		env[k] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var buf bytes.Buffer
	buf.WriteString("--clearenv\x00")
	for _, k := range keys {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, fmt.Errorf("environment variable name %q is not valid (empty, or holds '=' or a NUL byte); rename it", k)
		}
		if strings.ContainsRune(env[k], 0) {
			return nil, fmt.Errorf("the value of environment variable %s holds a NUL byte, which no environment can carry; remove it", k)
		}
		buf.WriteString("--setenv\x00" + k + "\x00" + env[k] + "\x00")
	}
	return buf.Bytes(), nil
}

// runSpec is one process to run inside a sandbox.
type runSpec struct {
	argv    []string
	cwd     string // in-sandbox; "" = the workdir
	env     map[string]string
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
	timeout time.Duration
}

// bwrapStatus is what bwrap writes to --json-status-fd.
type bwrapStatus struct {
	ChildPID *int `json:"child-pid"`
	ExitCode *int `json:"exit-code"`
}

// run runs rs in sandbox m (directory dir) and waits for it, in steps:
// set bubblewrap up (newCommand), start it where Destroy and Close can
// kill it (start), put its init under the sandbox's limits and on its
// network while the init waits (confine), let the command go, wait, and
// say how it ended (outcome). The timeout is shortened to the sandbox's
// remaining lifetime.
func (d *Driver) run(ctx context.Context, id string, m *meta, dir string, rs runSpec) (driver.ExecResult, error) {
	res := driver.ExecResult{ExitCode: -1, AppliedTimeout: d.commandTimeout(m, rs.timeout)}
	fail := func(err error) (driver.ExecResult, error) {
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: err}
	}
	envData, err := envArgs(m, rs.env)
	if err != nil {
		return fail(err)
	}
	if d.maxProcs > 0 && d.procs == nil {
		return res, &driver.Error{Op: "exec", Sandbox: id, Kind: driver.ErrRefused, Err: d.noProcLimit()}
	}
	if err := d.diskReady(m, dir); err != nil {
		return fail(err)
	}
	c, err := d.newCommand(m, dir, rs, envData)
	if err != nil {
		return fail(err)
	}
	defer c.close()
	st, err := d.start(id, m, dir, c)
	if err != nil {
		return res, err
	}
	defer d.active.Done() // last: after the clean-ups below have joined
	defer d.untrack(m.Name, c.cmd)
	pidc, statusc := readStatus(c.statusR)

	var timedOut atomic.Bool
	timer := time.AfterFunc(res.AppliedTimeout, func() { timedOut.Store(true); st.kill() })
	defer timer.Stop()
	stopCtx := context.AfterFunc(ctx, st.kill)
	defer stopCtx()

	var e ending
	var undo []func()
	// Off the command's path, finished by Close (afterCommand).
	defer func() {
		for _, f := range undo {
			d.afterCommand(f)
		}
	}()
	if pid, started := <-pidc; started {
		undo, e.network, e.limitErr = d.confine(m, c, st, pid)
	}
	_, _ = c.blockW.Write([]byte{1}) // fails only if bwrap died; Wait reports that
	c.blockW.Close()
	full := d.watchFull(m, dir)

	e.waitErr = c.cmd.Wait()
	timer.Stop()
	res.Duration = time.Since(c.started)
	e.diskFull = full.end(d, m, dir)
	e.status = <-statusc
	d.mu.Lock()
	e.lost = st.lost
	d.mu.Unlock()
	e.timedOut, e.ctxErr = timedOut.Load(), ctx.Err()
	return c.outcome(id, res, e)
}

// commandTimeout is a command's timeout: the caller's (the default when
// it gave none), no later than the sandbox's end.
func (d *Driver) commandTimeout(m *meta, timeout time.Duration) time.Duration {
	if timeout <= 0 {
		timeout = driver.DefaultExecTimeout
	}
	if left := m.ExpiresAt.Sub(d.now()); !m.ExpiresAt.IsZero() && left < timeout {
		timeout = max(left, time.Millisecond)
	}
	return timeout
}

// command is one run of bubblewrap: the process, and our ends of the
// pipes it is given.
type command struct {
	cmd     *exec.Cmd
	prog    string    // what runs: bwrap, or prlimit, which execs it
	started time.Time // when it was started
	lim     limits
	// fds are bwrap's copies of what it inherits, ours closed once it
	// has started (or failed to).
	fds fdList
	// statusR reads --json-status-fd: EOF once bwrap has ended.
	statusR *os.File
	// blockW is written once the limits are in place: bwrap's init
	// waits on --block-fd, inside the sandbox's namespaces, until then.
	blockW *os.File
	// diag keeps the end of stderr: when bubblewrap itself fails, its
	// reason is there.
	diag   *tailbuf.Buffer
	stderr io.Writer // the caller's
}

// close lets go of our ends of c's pipes.
func (c *command) close() {
	c.fds.close()
	c.fds = nil
	for _, f := range []*os.File{c.statusR, c.blockW} {
		if f != nil {
			f.Close()
		}
	}
}

// newCommand sets up bubblewrap to run rs in sandbox m (directory dir),
// with environment envData (envArgs): its pipes, its arguments, and the
// process, not yet started.
func (d *Driver) newCommand(m *meta, dir string, rs runSpec, envData []byte) (*command, error) {
	c := &command{lim: d.limitsOf(m), diag: tailbuf.New(2048)}
	var envW *os.File
	fail := func(err error) (*command, error) {
		c.close()
		if envW != nil {
			envW.Close()
		}
		return nil, err
	}
	var statusW, envR, blockR *os.File
	var err error
	if c.statusR, statusW, err = os.Pipe(); err != nil {
		return fail(err)
	}
	args := []string{"--json-status-fd", c.fds.add(statusW)}
	// The environment can be larger than a pipe's buffer: it is written
	// while bwrap reads (below).
	if envR, envW, err = os.Pipe(); err != nil {
		return fail(err)
	}
	args = append(args, "--args", c.fds.add(envR))
	if blockR, c.blockW, err = os.Pipe(); err != nil {
		return fail(err)
	}
	args = append(args, "--block-fd", c.fds.add(blockR))
	userns, attr, err := d.usernsArgs(m, &c.fds)
	if err != nil {
		return fail(err)
	}
	more, err := d.bwrapArgs(m, dir, commandDir(m, rs.cwd), rs.argv, userns, &c.fds)
	if err != nil {
		return fail(err)
	}
	d.process(c, append(args, more...), rs, attr)
	go func() {
		_, _ = envW.Write(envData) // fails only if bwrap died; Wait reports that
		envW.Close()
	}()
	return c, nil
}

// commandDir is where in sandbox m a command runs: cwd, relative to the
// workdir, or the workdir itself.
func commandDir(m *meta, cwd string) string {
	if cwd == "" {
		return m.Spec.Workdir
	}
	if !path.IsAbs(cwd) {
		cwd = path.Join(m.Spec.Workdir, cwd)
	}
	return path.Clean(cwd)
}

// process makes c's process, bwrap with args (under prlimit when no
// memory cgroup holds the memory limit), with rs's streams.
func (d *Driver) process(c *command, args []string, rs runSpec, attr *syscall.SysProcAttr) {
	c.prog = d.bwrap
	if d.memCgroup.memory == "" {
		// No memory cgroup: prlimit execs bwrap, so the limit is inherited
		// by every process of the command (RLIMIT_AS is per process).
		limit := strconv.FormatInt(int64(c.lim.MemoryMiB)<<20, 10)
		args = append([]string{"--as=" + limit + ":" + limit, "--", d.bwrap}, args...)
		c.prog = d.prlimit
	}
	stdout, stderr := rs.stdout, rs.stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	c.stderr = stderr
	cmd := exec.Command(c.prog, args...)
	cmd.Env = []string{} // empty, not nil (nil would inherit ours)
	cmd.Stdin = rs.stdin
	cmd.Stdout = stdout
	cmd.Stderr = io.MultiWriter(stderr, c.diag)
	cmd.ExtraFiles = c.fds
	cmd.SysProcAttr = attr
	cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Pdeathsig = true, syscall.SIGKILL
	// The namespace dies with bwrap, so pipes close promptly; this only
	// bounds the wait if something unexpected keeps them open.
	cmd.WaitDelay = 5 * time.Second
	c.cmd = cmd
}

// start starts c, a command of sandbox m (directory dir), unless the
// driver is closed or the sandbox destroyed, and tracks it, so that
// Destroy and Close can kill it and Close waits for it: the caller ends
// that with untrack and then d.active.Done.
func (d *Driver) start(id string, m *meta, dir string, c *command) (*execState, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, &driver.Error{Op: "exec", Sandbox: id, Err: errClosed}
	}
	if _, err := os.Stat(filepath.Join(dir, metaFile)); err != nil {
		return nil, &driver.Error{Op: "exec", Sandbox: id, Kind: driver.ErrGone, Err: errors.New("sandbox was destroyed")}
	}
	if d.beforeStart != nil {
		d.beforeStart()
	}
	c.started = time.Now()
	keepFdsFromChildren()
	err := c.cmd.Start()
	// bwrap has its copies now; closing ours lets the status pipe report
	// EOF when bwrap ends.
	c.fds.close()
	c.fds = nil
	if err != nil {
		return nil, &driver.Error{Op: "exec", Sandbox: id, Err: fmt.Errorf("cannot start %s: %v", c.prog, err)}
	}
	// By name: Destroy finds them whichever form of the id it is given.
	st := &execState{cmd: c.cmd}
	if d.running[m.Name] == nil {
		d.running[m.Name] = map[*exec.Cmd]*execState{}
	}
	d.running[m.Name][c.cmd] = st
	d.active.Add(1) // under mu, the driver open: Close waits for it
	return st, nil
}

// untrack forgets cmd, a command of sandbox name that has ended.
func (d *Driver) untrack(name string, cmd *exec.Cmd) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.running[name], cmd)
	if len(d.running[name]) == 0 {
		delete(d.running, name)
	}
}

// readStatus reads bwrap's status documents from r. The first names its
// init (host pid), which then waits on the block fd: sent on pidc, which
// closes without it when bwrap ended first. The last holds the exit code:
// what was read is sent on statusc at EOF.
func readStatus(r io.Reader) (pidc <-chan int, statusc <-chan bwrapStatus) {
	pids := make(chan int, 1)
	statuses := make(chan bwrapStatus, 1)
	go func() {
		var got bwrapStatus
		dec := json.NewDecoder(r)
		for {
			var s bwrapStatus
			if dec.Decode(&s) != nil {
				break
			}
			if s.ChildPID != nil && got.ChildPID == nil {
				got.ChildPID = s.ChildPID
				pids <- *s.ChildPID
			}
			if s.ExitCode != nil {
				got.ExitCode = s.ExitCode
			}
		}
		close(pids)
		statuses <- got
	}()
	return pids, statuses
}

// confine puts the command of sandbox m whose bwrap init is host process
// pid under its limits and, when its spec asks for one, on its network,
// while the init waits on its block fd. It returns what to undo once the
// command has ended, off its path (afterCommand): its cgroups go once its
// init, and with it every process of it, has exited. On an error the
// command has been killed: it never runs without its limits.
func (d *Driver) confine(m *meta, c *command, st *execState, pid int) (undo []func(), network *sandboxNetwork, err error) {
	init, err := watchInit(pid, c.cmd.Process.Pid)
	if err == nil {
		st.watch(init)
		var release func() error
		release, err = d.applyLimits(pid, d.sandboxCgroup(m.Name), c.lim)
		undo = append(undo, func() { d.releaseAfterExit(init, release) })
	}
	if err == nil && d.needsNetwork(m.Spec) {
		if network, err = d.startNetwork(pid, m.Spec, d.sandboxIDs(m), st.kill); err == nil {
			undo = append(undo, network.stop)
		}
	}
	if err != nil {
		st.kill()
	} else if d.confined != nil {
		d.confined(pid)
	}
	return undo, network, err
}

// ending is what run saw of a command's end.
type ending struct {
	limitErr error // confine's
	lost     bool  // its sandbox was destroyed
	timedOut bool
	ctxErr   error
	waitErr  error
	status   bwrapStatus
	diskFull bool // the sandbox's disk filled while it ran
	network  *sandboxNetwork
}

// outcome is how command c ended, as res and the error Exec returns.
func (c *command) outcome(id string, res driver.ExecResult, e ending) (driver.ExecResult, error) {
	switch {
	case e.limitErr != nil:
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: e.limitErr}
	case e.lost:
		res.SandboxLost = true
		return res, nil
	case e.timedOut:
		res.TimedOut = true
		return res, nil
	case e.ctxErr != nil:
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: e.ctxErr}
	case e.status.ChildPID == nil:
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: fmt.Errorf("bubblewrap could not set up the sandbox: %s", strings.TrimSpace(c.diag.String()))}
	}
	var exitErr *exec.ExitError
	if e.waitErr != nil && !errors.As(e.waitErr, &exitErr) {
		// The command ran but its output could not be delivered.
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: e.waitErr}
	}
	if e.status.ExitCode != nil {
		res.ExitCode = *e.status.ExitCode
	} else {
		res.ExitCode = c.cmd.ProcessState.ExitCode()
	}
	if res.ExitCode != 0 && e.diskFull {
		// Its own error said only "No space left on device".
		fmt.Fprintln(c.stderr, errDiskFull(c.lim))
	}
	if lost := e.network.lost(); res.ExitCode != 0 && lost != "" {
		fmt.Fprintln(c.stderr, lost) // its own errors said only that connections failed
	}
	return res, nil
}

// afterCommand runs clean-up f off a command's path; Close waits for it.
// Only run calls it, while its command still counts in d.active: an Add
// then never races Close's Wait.
func (d *Driver) afterCommand(f func()) {
	d.active.Add(1)
	go func() {
		defer d.active.Done()
		f()
	}()
}

// releaseAfterExit undoes a command's limits (removes its cgroups) once
// its init has exited; what cannot be undone is logged, and left to a
// later New.
func (d *Driver) releaseAfterExit(init *initExit, release func() error) {
	if !init.wait(initExitGuard) {
		d.log.Warn("a sandbox's processes had not ended a minute after its command was stopped; its cgroups stay until a later worker start removes them")
		return
	}
	if err := release(); err != nil {
		d.log.Warn("a command's limits could not be undone; a later worker start removes what is left", "error", err)
	}
}

// Exec runs req.Command through sh -c in the sandbox.
func (d *Driver) Exec(ctx context.Context, id string, req driver.ExecRequest) (driver.ExecResult, error) {
	m, dir, err := d.liveMeta("exec", id)
	if err != nil {
		return driver.ExecResult{}, err
	}
	return d.run(ctx, id, m, dir, runSpec{
		argv: []string{"/bin/sh", "-c", req.Command}, cwd: req.Workdir, env: req.Env,
		stdin: req.Stdin, stdout: req.Stdout, stderr: req.Stderr, timeout: req.Timeout,
	})
}
