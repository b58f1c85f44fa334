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
	// data passes a small generated file, read-only at dest.
	data := func(b []byte, dest string) error {
		fd, err := fds.addData(b)
		args = append(args, "--ro-bind-data", fd, dest)
		return err
	}
	if d.seccomp != nil {
		fd, err := fds.addData(d.seccomp)
		if err != nil {
			return nil, err
		}
		args = append(args, "--seccomp", fd)
	}
	// A network namespace of its own: an open one is connected by
	// slirp4netns once bwrap has made it (Driver.run).
	open := m.Spec.NetworkPolicy().Open
	if !open || !d.shareNet {
		args = append(args, "--unshare-net")
	}
	if m.Rootfs != "" {
		var err error
		if args, err = mountImage(args, m.Rootfs, fds); err != nil {
			return nil, err
		}
		// The image's resolver names an address slirp4netns does not
		// relay; where it has a resolv.conf to mount over, use slirp's.
		if st, err := os.Lstat(filepath.Join(m.Rootfs, "etc", "resolv.conf")); open && !d.shareNet && err == nil && st.Mode().IsRegular() {
			if err := data(sandboxResolvConf(nil), "/etc/resolv.conf"); err != nil {
				return nil, err
			}
		}
	} else {
		for _, p := range hostSystemDirs {
			var err error
			if args, err = mountEntry(args, p, p); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
		}
		for _, name := range hostEtc {
			args = append(args, "--ro-bind-try", "/etc/"+name, "/etc/"+name)
		}
		if err := errors.Join(data(d.passwd, "/etc/passwd"), data(d.group, "/etc/group")); err != nil {
			return nil, err
		}
		if open {
			for _, name := range hostEtcNetwork {
				args = append(args, "--ro-bind-try", "/etc/"+name, "/etc/"+name)
			}
			if d.shareNet {
				args = append(args, "--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf")
			} else {
				hostResolv, _ := os.ReadFile("/etc/resolv.conf")
				if err := data(sandboxResolvConf(hostResolv), "/etc/resolv.conf"); err != nil {
					return nil, err
				}
			}
		} else if err := data([]byte(sandboxHosts), "/etc/hosts"); err != nil {
			return nil, err
		}
	}
	args = append(args,
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
		"--")
	return append(args, argv...), nil
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

// run runs rs in sandbox m (directory dir) and waits for it. The timeout is
// shortened to the sandbox's remaining lifetime.
func (d *Driver) run(ctx context.Context, id string, m *meta, dir string, rs runSpec) (driver.ExecResult, error) {
	res := driver.ExecResult{ExitCode: -1}
	timeout := rs.timeout
	if timeout <= 0 {
		timeout = driver.DefaultExecTimeout
	}
	if left := m.ExpiresAt.Sub(d.now()); !m.ExpiresAt.IsZero() && left < timeout {
		timeout = max(left, time.Millisecond)
	}
	res.AppliedTimeout = timeout
	cwd := rs.cwd
	if cwd == "" {
		cwd = m.Spec.Workdir
	} else if !path.IsAbs(cwd) {
		cwd = path.Join(m.Spec.Workdir, cwd)
	}
	envData, err := envArgs(m, rs.env)
	if err != nil {
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: err}
	}
	if d.maxProcs > 0 && d.procs == nil {
		return res, &driver.Error{Op: "exec", Sandbox: id, Kind: driver.ErrRefused, Err: d.noProcLimit()}
	}
	if err := d.diskReady(m, dir); err != nil {
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: err}
	}
	// Our copies of everything bwrap inherits close once it has started
	// (or failed to).
	var fds fdList
	defer func() { fds.close() }()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: err}
	}
	defer statusR.Close()
	// The environment can be larger than a pipe's buffer: it is written
	// while bwrap reads (below).
	envR, envW, err := os.Pipe()
	if err != nil {
		statusW.Close()
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: err}
	}
	// bwrap's init waits on --block-fd, inside the sandbox's namespaces,
	// until the process limit is in place.
	blockR, blockW, err := os.Pipe()
	if err != nil {
		statusW.Close()
		envR.Close()
		envW.Close()
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: err}
	}
	defer blockW.Close()
	args := []string{"--json-status-fd", fds.add(statusW), "--args", fds.add(envR), "--block-fd", fds.add(blockR)}
	userns, attr, err := d.usernsArgs(m, &fds)
	if err != nil {
		envW.Close()
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: err}
	}
	more, err := d.bwrapArgs(m, dir, path.Clean(cwd), rs.argv, userns, &fds)
	if err != nil {
		envW.Close()
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: err}
	}
	args = append(args, more...)
	go func(data []byte) {
		_, _ = envW.Write(data) // fails only if bwrap died; Wait reports that
		envW.Close()
	}(envData)
	prog := d.bwrap
	lim := d.limitsOf(m)
	if d.memCgroup.memory == "" {
		// No memory cgroup: prlimit execs bwrap, so the limit is inherited
		// by every process of the command (RLIMIT_AS is per process).
		limit := strconv.FormatInt(int64(lim.MemoryMiB)<<20, 10)
		args = append([]string{"--as=" + limit + ":" + limit, "--", d.bwrap}, args...)
		prog = d.prlimit
	}
	// Keep the end of stderr: when bubblewrap itself fails, its reason is there.
	diag := tailbuf.New(2048)
	stdout, stderr := rs.stdout, rs.stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	cmd := exec.Command(prog, args...)
	cmd.Env = []string{} // empty, not nil (nil would inherit ours)
	cmd.Stdin = rs.stdin
	cmd.Stdout = stdout
	cmd.Stderr = io.MultiWriter(stderr, diag)
	cmd.ExtraFiles = fds
	cmd.SysProcAttr = attr
	cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Pdeathsig = true, syscall.SIGKILL
	// The namespace dies with bwrap, so pipes close promptly; this only
	// bounds the wait if something unexpected keeps them open.
	cmd.WaitDelay = 5 * time.Second

	st := &execState{cmd: cmd}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: errClosed}
	}
	if _, err := os.Stat(filepath.Join(dir, metaFile)); err != nil {
		d.mu.Unlock()
		return res, &driver.Error{Op: "exec", Sandbox: id, Kind: driver.ErrGone, Err: errors.New("sandbox was destroyed")}
	}
	if d.beforeStart != nil {
		d.beforeStart()
	}
	start := time.Now()
	keepFdsFromChildren()
	err = cmd.Start()
	// bwrap has its copies now; closing ours lets the status pipe report
	// EOF when bwrap ends.
	fds.close()
	fds = nil
	if err != nil {
		d.mu.Unlock()
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: fmt.Errorf("cannot start %s: %v", prog, err)}
	}
	// By name: Destroy finds them whichever form of the id it is given.
	if d.running[m.Name] == nil {
		d.running[m.Name] = map[*exec.Cmd]*execState{}
	}
	d.running[m.Name][cmd] = st
	d.active.Add(1) // under mu, the driver open: Close waits for it
	d.mu.Unlock()
	defer d.active.Done() // last: after the clean-ups below have joined
	defer func() {
		d.mu.Lock()
		delete(d.running[m.Name], cmd)
		if len(d.running[m.Name]) == 0 {
			delete(d.running, m.Name)
		}
		d.mu.Unlock()
	}()

	// The first status document names bwrap's init (host pid), which
	// then waits on the block fd; the last one holds the exit code.
	pidc := make(chan int, 1)
	statusc := make(chan bwrapStatus, 1)
	go func() {
		var got bwrapStatus
		dec := json.NewDecoder(statusR)
		for {
			var s bwrapStatus
			if dec.Decode(&s) != nil {
				break
			}
			if s.ChildPID != nil && got.ChildPID == nil {
				got.ChildPID = s.ChildPID
				pidc <- *s.ChildPID
			}
			if s.ExitCode != nil {
				got.ExitCode = s.ExitCode
			}
		}
		close(pidc)
		statusc <- got
	}()

	var timedOut atomic.Bool
	timer := time.AfterFunc(timeout, func() { timedOut.Store(true); st.kill() })
	defer timer.Stop()
	stopCtx := context.AfterFunc(ctx, st.kill)
	defer stopCtx()

	var limitErr error
	pid, started := <-pidc
	if started {
		var init *initExit
		if init, limitErr = watchInit(pid, cmd.Process.Pid); limitErr == nil {
			var release func() error
			release, limitErr = d.applyLimits(pid, d.sandboxCgroup(m.Name), lim)
			// Off the command's path, finished by Close: its cgroups go
			// once its init, and with it every process of it, has exited.
			defer d.afterCommand(func() { d.releaseAfterExit(init, release) })
		}
		if limitErr != nil {
			st.kill() // never run the command without its limits
		}
	}
	var network *sandboxNetwork
	if started && limitErr == nil && d.needsNetwork(m.Spec) {
		if network, limitErr = d.startNetwork(pid, m.Spec, d.sandboxIDs(m), st.kill); limitErr != nil {
			st.kill()
		} else {
			// Like the cgroup's removal: off the command's path, finished
			// by Close.
			defer d.afterCommand(network.stop)
		}
	}
	_, _ = blockW.Write([]byte{1}) // fails only if bwrap died; Wait reports that
	blockW.Close()
	full := d.watchFull(m, dir)

	waitErr := cmd.Wait()
	timer.Stop()
	res.Duration = time.Since(start)
	diskWasFull := full.end(d, m, dir)
	status := <-statusc
	d.mu.Lock()
	lost := st.lost
	d.mu.Unlock()

	switch {
	case limitErr != nil:
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: limitErr}
	case lost:
		res.SandboxLost = true
		return res, nil
	case timedOut.Load():
		res.TimedOut = true
		return res, nil
	case ctx.Err() != nil:
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: ctx.Err()}
	case status.ChildPID == nil:
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: fmt.Errorf("bubblewrap could not set up the sandbox: %s", strings.TrimSpace(diag.String()))}
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		// The command ran but its output could not be delivered.
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: waitErr}
	}
	if status.ExitCode != nil {
		res.ExitCode = *status.ExitCode
	} else {
		res.ExitCode = cmd.ProcessState.ExitCode()
	}
	if res.ExitCode != 0 && diskWasFull {
		// Its own error said only "No space left on device".
		fmt.Fprintln(stderr, errDiskFull(lim))
	}
	if lost := network.lost(); res.ExitCode != 0 && lost != "" {
		fmt.Fprintln(stderr, lost) // its own errors said only that connections failed
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
