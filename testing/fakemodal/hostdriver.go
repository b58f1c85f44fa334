package fakemodal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// NewDefaultExecDriver returns the driver the fake runs commands with when
// Options.Exec is nil: a small bubblewrap runner private to the fake (each
// sandbox a host directory mounted at its workdir and another at /tmp, so
// both persist across commands as on Modal; host /usr etc. read-only; no
// network unless asked). File calls reach the workdir only. It exists so the fake has no dependency on a
// production driver; pass sandbox/local's driver in Options.Exec for the
// real isolation.
func NewDefaultExecDriver(root string, log hclog.Logger) (sandbox.Driver, error) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		return nil, fmt.Errorf("fakemodal runs sandbox commands under bubblewrap, which is not installed: apt-get install bubblewrap (%v)", err)
	}
	if root == "" {
		if root, err = os.MkdirTemp("", "fakemodal-"); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	return &hostDriver{root: root, bwrap: bwrap, sbs: map[string]*hostSandbox{}}, nil
}

type hostDriver struct {
	root, bwrap string
	mu          sync.Mutex
	sbs         map[string]*hostSandbox
}

type hostSandbox struct {
	base    string // host directory holding work/ and tmp/
	dir     string // host directory mounted at spec.Workdir
	spec    sandbox.Spec
	created time.Time
}

func (d *hostDriver) Backend() string { return "fakemodal-host" }
func (d *hostDriver) Close() error    { return nil }

func (d *hostDriver) Create(ctx context.Context, name string, spec sandbox.Spec) (sandbox.Info, error) {
	base := filepath.Join(d.root, name)
	dir := filepath.Join(base, "work")
	for _, p := range []string{dir, filepath.Join(base, "tmp")} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return sandbox.Info{}, err
		}
	}
	d.mu.Lock()
	d.sbs[name] = &hostSandbox{base: base, dir: dir, spec: spec, created: time.Now()}
	d.mu.Unlock()
	return sandbox.Info{ID: name, Name: name, Backend: d.Backend(), Workdir: spec.Workdir}, nil
}

func (d *hostDriver) get(id string) (*hostSandbox, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	sb := d.sbs[id]
	if sb == nil {
		return nil, &sandbox.Error{Op: "use", Sandbox: id, Kind: sandbox.ErrGone}
	}
	return sb, nil
}

func (d *hostDriver) Info(ctx context.Context, id string) (sandbox.Info, error) {
	sb, err := d.get(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	return sandbox.Info{ID: id, Name: id, Backend: d.Backend(), Workdir: sb.spec.Workdir, CreatedAt: sb.created}, nil
}

func (d *hostDriver) Exec(ctx context.Context, id string, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	sb, err := d.get(id)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	wd := req.Workdir
	if wd == "" {
		wd = sb.spec.Workdir
	}
	args := []string{"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--new-session"}
	if sb.spec.NetworkPolicy().Block {
		args = append(args, "--unshare-net")
	}
	for _, dir := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"} {
		fi, err := os.Lstat(dir)
		switch {
		case err != nil:
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(dir)
			args = append(args, "--symlink", target, dir)
		default:
			args = append(args, "--ro-bind", dir, dir)
		}
	}
	args = append(args, "--proc", "/proc", "--dev", "/dev", "--bind", filepath.Join(sb.base, "tmp"), "/tmp",
		"--bind", sb.dir, sb.spec.Workdir, "--chdir", wd, "--clearenv",
		"--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "--setenv", "HOME", sb.spec.Workdir)
	env := maps.Clone(sb.spec.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, req.Env)
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "--setenv", k, env[k])
	}
	args = append(args, "sh", "-c", req.Command)

	runCtx, cancel := context.WithTimeout(ctx, req.Timeout)
	defer cancel()
	cmd := exec.Command(d.bwrap, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = req.Stdout, req.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return sandbox.ExecResult{}, err
	}
	// Stdin is copied without being waited for: a command that never reads
	// it must not wait for a client that never closes it.
	go func() {
		if req.Stdin != nil {
			io.Copy(stdin, req.Stdin) //nolint:errcheck
		}
		stdin.Close()
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var timedOut bool
	select {
	case err = <-waited:
	case <-runCtx.Done():
		timedOut = ctx.Err() == nil
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) //nolint:errcheck
		err = <-waited
	}
	stdin.Close()
	res := sandbox.ExecResult{TimedOut: timedOut, AppliedTimeout: req.Timeout, Duration: time.Since(start)}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		res.ExitCode = exitErr.ExitCode()
		if st, ok := exitErr.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			res.ExitCode = 128 + int(st.Signal())
		}
	default:
		return res, err
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, nil
}

// hostPath maps an in-sandbox path under the workdir to the host.
func (d *hostDriver) hostPath(id, p string) (string, error) {
	sb, err := d.get(id)
	if err != nil {
		return "", err
	}
	p = path.Clean(p)
	wd := sb.spec.Workdir
	if p != wd && !strings.HasPrefix(p, wd+"/") {
		return "", &sandbox.Error{Op: "file", Sandbox: id, Path: p, Kind: sandbox.ErrNotFound,
			Err: fmt.Errorf("only paths under %s are reachable in the fake", wd)}
	}
	return filepath.Join(sb.dir, strings.TrimPrefix(p, wd)), nil
}

func (d *hostDriver) OpenFile(ctx context.Context, id, p string, maxBytes int64) (io.ReadCloser, int64, error) {
	hp, err := d.hostPath(id, p)
	if err != nil {
		return nil, 0, err
	}
	f, err := os.Open(hp)
	if err != nil {
		return nil, 0, fileErr(id, p, err)
	}
	fi, err := f.Stat()
	if err == nil {
		switch {
		case fi.IsDir():
			err = &sandbox.Error{Op: "read", Sandbox: id, Path: p, Kind: sandbox.ErrIsDir}
		case !fi.Mode().IsRegular():
			err = &sandbox.Error{Op: "read", Sandbox: id, Path: p, Kind: sandbox.ErrNotRegular}
		case maxBytes >= 0 && fi.Size() > maxBytes:
			err = &sandbox.TooLargeError{Path: p, Size: fi.Size(), MaxBytes: maxBytes}
		}
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

func (d *hostDriver) WriteFile(ctx context.Context, id, p string, r io.Reader, mode fs.FileMode) error {
	hp, err := d.hostPath(id, p)
	if err != nil {
		return err
	}
	if fi, err := os.Stat(hp); err == nil && fi.IsDir() {
		return &sandbox.Error{Op: "write", Sandbox: id, Path: p, Kind: sandbox.ErrIsDir}
	}
	if err := os.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
		return fileErr(id, p, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(hp), ".write-*")
	if err != nil {
		return fileErr(id, p, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, r); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), hp)
}

func (d *hostDriver) List(ctx context.Context, id, p string) ([]sandbox.FileInfo, error) {
	hp, err := d.hostPath(id, p)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(hp)
	if err != nil {
		return nil, fileErr(id, p, err)
	}
	out := make([]sandbox.FileInfo, 0, len(entries))
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, toInfo(path.Join(p, e.Name()), fi))
	}
	return out, nil
}

func (d *hostDriver) Stat(ctx context.Context, id, p string) (sandbox.FileInfo, error) {
	hp, err := d.hostPath(id, p)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	fi, err := os.Lstat(hp)
	if err != nil {
		return sandbox.FileInfo{}, fileErr(id, p, err)
	}
	return toInfo(path.Clean(p), fi), nil
}

func toInfo(p string, fi fs.FileInfo) sandbox.FileInfo {
	return sandbox.FileInfo{Name: path.Base(p), Path: p, Size: fi.Size(), Mode: fi.Mode(), ModTime: fi.ModTime()}
}

func fileErr(id, p string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return &sandbox.Error{Op: "file", Sandbox: id, Path: p, Kind: sandbox.ErrNotFound}
	}
	return &sandbox.Error{Op: "file", Sandbox: id, Path: p, Err: err}
}

func (d *hostDriver) Tags(ctx context.Context, id string) (map[string]string, error) {
	return nil, sandbox.ErrUnsupported
}

func (d *hostDriver) SetTags(ctx context.Context, id string, tags map[string]string) error {
	return sandbox.ErrUnsupported
}

func (d *hostDriver) ListSandboxes(ctx context.Context, match map[string]string) ([]sandbox.Info, error) {
	return nil, sandbox.ErrUnsupported
}

func (d *hostDriver) Destroy(ctx context.Context, id string) error {
	d.mu.Lock()
	sb := d.sbs[id]
	delete(d.sbs, id)
	d.mu.Unlock()
	if sb == nil {
		return nil
	}
	return os.RemoveAll(sb.base)
}
