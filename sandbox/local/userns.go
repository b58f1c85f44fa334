package local

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// A root worker's sandboxes run as an unprivileged host uid of the
// operator's choosing (SandboxUIDEnv), root inside the sandbox. Before,
// their processes were uid 0 on the host as well: the kernel charges
// per-user limits (inotify instances and watches, pipe buffers, epoll
// watches, pending signals, queued messages) to a process's uid, and
// those kept in user namespaces (inotify among them) to the owner of the
// outermost one, which bwrap, run by root, made root's. A sandbox that
// took all 128 inotify instances left root on the host none (issue 38).
//
// How: a user namespace owned by that uid, made once per driver (per
// worker process) and shared by its commands, in which uid 0 is the
// sandbox uid and host root is 65534 (nobody, as any unmapped uid shows;
// mapped, so that bwrap, setting a command up there with every capability
// in it, may still reach the worker's root-only directories, which the
// sandbox uid alone could not). bwrap runs as the sandbox uid, joins it
// (--userns) and becomes its root before setting the command up; the
// command has no capability there (--cap-drop ALL), so the mapping of
// root gives it nothing. The namespace may not hold further user
// namespaces (user.max_user_namespaces = 0 in it, which bwrap asserts:
// its own --disable-userns cannot be combined with --userns), and no
// process in it may change its groups (setgroups deny).
//
// The sandbox's own files (its workdir and /tmp, and what the worker
// stages in) belong to the sandbox uid; the sandbox's directory and its
// disk image stay the worker's.

// SandboxUIDEnv is the operator's choice of the host uid (and gid:
// UID:GID) a root worker's sandboxes run as; "off" runs them as root, as
// before. Unset: DefaultSandboxUID. It must belong to no user of the
// host: whoever has it on the host owns the sandboxes' user namespace.
const SandboxUIDEnv = "AIRFLOW_GO_WORKER_LOCAL_SANDBOX_UID"

// DefaultSandboxUID is the uid and gid of a root worker's sandboxes when
// SandboxUIDEnv is unset: above the container ranges systemd hands out
// (524288-1879048191) and below 2^31, where some tools see negative ids.
const DefaultSandboxUID = 2000000000

// ids are a host uid and gid; zero: the worker's own.
type ids struct {
	UID int `json:"uid"`
	GID int `json:"gid"`
}

func (i ids) set() bool { return i.UID != 0 }

// sandboxIDsFromEnv reads SandboxUIDEnv for a root worker: zero ids
// when the operator turned it off.
func sandboxIDsFromEnv() (ids, error) {
	v := strings.TrimSpace(os.Getenv(SandboxUIDEnv))
	if v == "" {
		return ids{DefaultSandboxUID, DefaultSandboxUID}, nil
	}
	if v == "off" {
		return ids{}, nil
	}
	bad := func(why string) (ids, error) {
		return ids{}, fmt.Errorf("%s=%q: %s; give a uid (and gid, UID:GID) that no user of this host has, such as %d, or off to run sandboxes as root", SandboxUIDEnv, v, why, DefaultSandboxUID)
	}
	u, g, hasGID := strings.Cut(v, ":")
	if !hasGID {
		g = u
	}
	uid, err1 := strconv.ParseUint(u, 10, 32)
	gid, err2 := strconv.ParseUint(g, 10, 32)
	switch {
	case err1 != nil || err2 != nil:
		return bad("not a number")
	case uid == 0 || gid == 0:
		return bad("0 is root")
	case uid >= 65534 && uid <= 65535 || gid >= 65534 && gid <= 65535 || uid == 1<<32-1 || gid == 1<<32-1:
		return bad("65534, 65535 and 4294967295 are nobody's or no id")
	}
	if name := accountNamed("/etc/passwd", int(uid)); name != "" {
		return bad(fmt.Sprintf("uid %d is the host user %s's, who would own every sandbox", uid, name))
	}
	if name := accountNamed("/etc/group", int(gid)); name != "" {
		return bad(fmt.Sprintf("gid %d is the host group %s's", gid, name))
	}
	return ids{int(uid), int(gid)}, nil
}

// accountNamed is the name /etc/passwd or /etc/group gives id, "" for none.
func accountNamed(file string, id int) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	want := strconv.Itoa(id)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Split(sc.Text(), ":"); len(fields) > 2 && fields[2] == want {
			return fields[0]
		}
	}
	return ""
}

// sandboxIDs is who sandbox m's processes are on the host: fixed when it
// was created (zero: the worker's own uid).
func (d *Driver) sandboxIDs(m *meta) ids {
	if m.Limits == nil {
		return ids{}
	}
	return m.Limits.Sandbox
}

// procAttr starts a process as i, with no supplementary group; as the
// worker for zero ids.
func (i ids) procAttr() *syscall.SysProcAttr {
	if !i.set() {
		return &syscall.SysProcAttr{}
	}
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(i.UID), Gid: uint32(i.GID), Groups: []uint32{}}}
}

// sandboxNamespaces are the two user namespaces a command of a
// sandbox running as some ids joins: bwrap sets the command up in outer,
// which owns its mounts and network, and then moves it into inner, one
// level below, where it has no capability over them (what bwrap's own
// --disable-userns does with namespaces it makes).
type sandboxNamespaces struct{ outer, inner *os.File }

// userNamespaces are the driver's namespaces, a pair per ids, made on
// demand and closed by Close.
type userNamespaces struct {
	mu sync.Mutex
	ns map[ids]sandboxNamespaces
}

// userNamespaces is the pair commands of sandboxes running as i join.
func (d *Driver) userNamespaces(i ids) (sandboxNamespaces, error) {
	d.userns.mu.Lock()
	defer d.userns.mu.Unlock()
	if p, ok := d.userns.ns[i]; ok {
		return p, nil
	}
	p, err := d.makeUserNamespaces(i)
	if err != nil {
		return p, fmt.Errorf("cannot make the user namespaces a root worker's sandboxes run in as uid %d (%v); set %s to another free uid, or to off to run them as root", i.UID, err, SandboxUIDEnv)
	}
	if d.userns.ns == nil {
		d.userns.ns = map[ids]sandboxNamespaces{}
	}
	d.userns.ns[i] = p
	return p, nil
}

// closeUserNamespaces lets go of the driver's namespaces.
func (d *Driver) closeUserNamespaces() {
	d.userns.mu.Lock()
	defer d.userns.mu.Unlock()
	for i, p := range d.userns.ns {
		p.outer.Close()
		p.inner.Close()
		delete(d.userns.ns, i)
	}
}

// makeUserNamespaces makes the pair for i: outer, owned by i.UID, maps
// uid and gid 0 to i and 65534 to host root; inner, below it, maps 0 to
// the same. Neither may hold further namespaces.
func (d *Driver) makeUserNamespaces(i ids) (sandboxNamespaces, error) {
	var p sandboxNamespaces
	outer, err := d.outerUserNamespace(i)
	if err != nil {
		return p, err
	}
	inner, err := d.innerUserNamespace(i, outer)
	if err == nil {
		err = d.forbidNestedUserNamespaces(i, inner, outer)
	}
	if err != nil {
		outer.Close()
		if inner != nil {
			inner.Close()
		}
		return p, err
	}
	return sandboxNamespaces{outer: outer, inner: inner}, nil
}

// outerUserNamespace makes a namespace owned by i.UID. Its owner is
// whoever makes it, and a Go process cannot make one as another uid (its
// children change uid after cloning), so bwrap, run as i, makes it
// (unshare(1) would do, but AppArmor on Ubuntu 24.04 lets only bwrap make
// user namespaces) and waits (--userns-block-fd) while the worker, root,
// writes the maps (which only root may: they map host root) and opens it.
func (d *Driver) outerUserNamespace(i ids) (*os.File, error) {
	pid, stop, err := d.namespaceMaker(i, nil, "--userns-block-fd")
	if err != nil {
		return nil, err
	}
	defer stop()
	for _, w := range []struct{ file, data string }{
		{"uid_map", fmt.Sprintf("0 %d 1\n65534 0 1\n", i.UID)},
		{"setgroups", "deny"},
		{"gid_map", fmt.Sprintf("0 %d 1\n65534 0 1\n", i.GID)},
	} {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/%s", pid, w.file), []byte(w.data), 0); err != nil {
			return nil, fmt.Errorf("cannot write the sandboxes' user namespace's %s: %v", w.file, err)
		}
	}
	return os.Open(fmt.Sprintf("/proc/%d/ns/user", pid))
}

// innerUserNamespace makes a namespace below outer, mapping its root to
// outer's: bwrap, run in outer as its root, makes it and maps it (only
// a process in a namespace or its parent may), then waits (--block-fd)
// while the worker opens it.
func (d *Driver) innerUserNamespace(i ids, outer *os.File) (*os.File, error) {
	pid, stop, err := d.namespaceMaker(i, outer, "--block-fd", "--uid", "0", "--gid", "0")
	if err != nil {
		return nil, err
	}
	defer stop()
	if err := waitIDMaps(pid, nil); err != nil {
		return nil, err
	}
	return os.Open(fmt.Sprintf("/proc/%d/ns/user", pid))
}

// namespaceMaker starts bwrap as i, in namespace in (nil: the worker's),
// making a user namespace and then waiting on the block fd named by
// block, and returns the pid of the process in the new namespace; stop
// kills bwrap, which never runs anything. more are bwrap arguments.
func (d *Driver) namespaceMaker(i ids, in *os.File, block string, more ...string) (pid int, stop func(), err error) {
	blockR, blockW, err := os.Pipe()
	if err != nil {
		return 0, nil, err
	}
	infoR, infoW, err := os.Pipe()
	if err != nil {
		blockR.Close()
		blockW.Close()
		return 0, nil, err
	}
	defer infoR.Close()
	name, args := d.bwrap, append([]string{"--unshare-user", block, "3", "--info-fd", "4"}, append(more, "--", "true")...)
	files := []*os.File{blockR, infoW}
	if in != nil { // bwrap runs inside it, as its root
		if name, err = exec.LookPath("nsenter"); err != nil {
			err = fmt.Errorf("nsenter (util-linux) is not installed: %v", err)
		}
		args = append([]string{"--user=/proc/self/fd/5", "--preserve-credentials", "--", d.bwrap}, args...)
		files = append(files, in)
	}
	var diag bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Env = []string{}
	cmd.Stderr = &diag
	cmd.ExtraFiles = files
	cmd.SysProcAttr = i.procAttr()
	cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Pdeathsig = true, syscall.SIGKILL
	if err == nil {
		keepFdsFromChildren()
		err = cmd.Start()
	}
	blockR.Close()
	infoW.Close()
	if err != nil {
		blockW.Close()
		return 0, nil, fmt.Errorf("cannot start %s: %v", name, err)
	}
	stop = func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		blockW.Close()
	}
	var info struct {
		ChildPID int `json:"child-pid"`
	}
	raw, _ := io.ReadAll(infoR) // complete at EOF: bwrap closes it once written
	if err := json.Unmarshal(raw, &info); err != nil || info.ChildPID <= 0 {
		stop() // its stderr is complete now
		return 0, nil, fmt.Errorf("bubblewrap, run as uid %d, made no user namespace: %s", i.UID, strings.TrimSpace(diag.String()))
	}
	return info.ChildPID, stop, nil
}

// forbidNestedUserNamespaces sets user.max_user_namespaces to 0 in each
// of nss, from a shell that joins it as i, its owner (or its owner's
// owner), and so its root, with every capability there: only a process
// in a namespace sets its limits.
func (d *Driver) forbidNestedUserNamespaces(i ids, nss ...*os.File) error {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return fmt.Errorf("nsenter (util-linux) is not installed: %v", err)
	}
	for _, ns := range nss {
		cmd := exec.Command(nsenter, "--user=/proc/self/fd/3", "--preserve-credentials", "--",
			"/bin/sh", "-c", "echo 0 > /proc/sys/user/max_user_namespaces")
		cmd.Env = []string{"PATH=" + defaultPath}
		cmd.ExtraFiles = []*os.File{ns}
		cmd.SysProcAttr = i.procAttr()
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
		keepFdsFromChildren()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("cannot forbid user namespaces inside the sandboxes' ones (%v): %s", err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// usernsArgs are bwrap's arguments that give a command of sandbox m its
// user namespaces, and attr the process attributes bwrap starts with:
// the sandbox's uid, joining the pair made for it (as the root of
// both); or the worker's, with namespaces of bwrap's own
// (--unshare-user).
func (d *Driver) usernsArgs(m *meta, fds *fdList) (args []string, attr *syscall.SysProcAttr, err error) {
	i := d.sandboxIDs(m)
	attr = i.procAttr()
	if !i.set() {
		args = []string{"--unshare-user"}
		if d.disableUserns {
			args = append(args, "--disable-userns") // no nested namespaces to climb out of
		}
		return args, attr, nil
	}
	p, err := d.userNamespaces(i)
	if err != nil {
		return nil, nil, err
	}
	// bwrap's copies: fds closes its files once bwrap has started.
	var fd [2]string
	for n, ns := range []*os.File{p.outer, p.inner} {
		dup, err := unix.FcntlInt(ns.Fd(), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			return nil, nil, err
		}
		fd[n] = fds.add(os.NewFile(uintptr(dup), "userns"))
	}
	return []string{"--userns", fd[0], "--userns2", fd[1], "--uid", "0", "--gid", "0", "--assert-userns-disabled"}, attr, nil
}

// giveToSandbox makes rel (under root) the sandbox's, when it belongs to
// the worker: what the worker makes in a sandbox's workdir or /tmp (the
// directories themselves, staged files and their parents) belongs to the
// sandbox's uid, so that its commands may change it as their own.
func giveToSandbox(root *os.Root, rel string, i ids) error {
	if !i.set() {
		return nil
	}
	st, err := root.Lstat(rel)
	if err != nil {
		return err
	}
	if int(ownerOf(st)) != os.Geteuid() {
		return nil // the sandbox's already (or someone's it made so)
	}
	return root.Lchown(rel, i.UID, i.GID)
}

// giveParentsToSandbox applies giveToSandbox to each directory from the
// root down to dir (relative to root).
func giveParentsToSandbox(root *os.Root, dir string, i ids) error {
	if !i.set() || dir == "." {
		return nil
	}
	var errs []error
	p := ""
	for _, c := range strings.Split(filepath.ToSlash(dir), "/") {
		p = filepath.Join(p, c)
		if err := giveToSandbox(root, p, i); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
