package main

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// host is the driver.Driver the stand-in's execd runs on: this container
// itself, with no isolation of its own (the container is the sandbox).
// Commands run as `sh -c` in execd's environment plus the request's, each
// in a process group of its own; a timeout or a cancelled context kills
// the command's whole process tree.
type host struct{}

var _ driver.Driver = (*host)(nil)

func (*host) Backend() string                           { return "execd-standin" }
func (*host) Capabilities() driver.Capabilities         { return driver.Capabilities{} }
func (*host) SpecProblems(driver.Spec) []driver.Problem { return nil }
func (*host) As(any) bool                               { return false }
func (*host) Close() error                              { return nil }

func (*host) Create(context.Context, string, driver.Spec) (driver.Info, error) {
	return driver.Info{}, &driver.Error{Op: "create", Kind: driver.ErrUnsupported}
}

func (*host) Info(_ context.Context, id string) (driver.Info, error) {
	return driver.Info{ID: id, Backend: "execd-standin"}, nil
}

func (*host) Destroy(context.Context, string) error {
	return &driver.Error{Op: "destroy", Kind: driver.ErrUnsupported}
}

// waitDelay bounds how long a finished command's output is waited for when
// a process it left behind keeps the pipes open.
const waitDelay = 2 * time.Second

func (*host) Exec(ctx context.Context, id string, req driver.ExecRequest) (driver.ExecResult, error) {
	start := time.Now()
	cmd := exec.Command("/bin/sh", "-c", req.Command)
	cmd.Dir = req.Workdir
	cmd.Env = os.Environ()
	for k, v := range req.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin = req.Stdin
	cmd.Stdout, cmd.Stderr = orDiscard(req.Stdout), orDiscard(req.Stderr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = waitDelay
	if err := cmd.Start(); err != nil {
		return driver.ExecResult{}, &driver.Error{Op: "exec", Sandbox: id, Err: err}
	}
	done := make(chan struct{})
	timedOut := false
	go func() {
		var timer <-chan time.Time
		if req.Timeout > 0 {
			t := time.NewTimer(req.Timeout)
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-done:
		case <-timer:
			timedOut = true
			killTree(cmd.Process.Pid)
		case <-ctx.Done():
			killTree(cmd.Process.Pid)
		}
	}()
	err := cmd.Wait()
	close(done)
	res := driver.ExecResult{AppliedTimeout: req.Timeout, Duration: time.Since(start), ExitCode: cmd.ProcessState.ExitCode()}
	var exitErr *exec.ExitError
	switch {
	case timedOut:
		res.TimedOut, res.ExitCode = true, -1
	case ctx.Err() != nil:
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: ctx.Err()}
	case err != nil && !errors.As(err, &exitErr) && !errors.Is(err, exec.ErrWaitDelay):
		return res, &driver.Error{Op: "exec", Sandbox: id, Err: err}
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.ExitCode = 128 + int(ws.Signal()) // as a shell reports it
	}
	return res, nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// killTree SIGKILLs pid's process group and every descendant of pid (a
// command may have started processes in groups or sessions of their own),
// until none is left.
func killTree(pid int) {
	for range 10 {
		procs := descendants(pid)
		syscall.Kill(-pid, syscall.SIGKILL)
		syscall.Kill(pid, syscall.SIGKILL)
		for _, p := range procs {
			syscall.Kill(p, syscall.SIGKILL)
		}
		if len(procs) == 0 {
			return
		}
	}
}

// descendants lists the processes below pid, from /proc's parent links.
func descendants(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		f := strings.Fields(rest)
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

func fileError(op, p string, err error) error {
	kind := error(nil)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		kind = driver.ErrNotFound
	case errors.Is(err, syscall.EISDIR):
		kind = driver.ErrIsDir
	}
	return &driver.Error{Op: op, Path: p, Kind: kind, Err: err}
}

func info(p string, fi fs.FileInfo) driver.FileInfo {
	return driver.FileInfo{Name: path.Base(p), Path: p, Size: fi.Size(), Mode: fi.Mode(), ModTime: fi.ModTime()}
}

// Stat lstats p: a final symlink is not followed.
func (*host) Stat(_ context.Context, _ string, p string) (driver.FileInfo, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return driver.FileInfo{}, fileError("stat", p, err)
	}
	return info(p, fi), nil
}

// List lists a directory's entries, sorted by name, each lstat'ed.
func (*host) List(_ context.Context, _ string, dir string) ([]driver.FileInfo, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fileError("list", dir, err)
	}
	out := make([]driver.FileInfo, 0, len(entries))
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			continue // gone since it was read
		}
		out = append(out, info(path.Join(dir, e.Name()), fi))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// OpenFile opens a regular file (following symlinks) for reading.
func (*host) OpenFile(_ context.Context, _ string, p string, maxBytes int64) (io.ReadCloser, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, 0, fileError("read", p, err)
	}
	fi, err := f.Stat()
	switch {
	case err != nil:
		f.Close()
		return nil, 0, fileError("read", p, err)
	case fi.IsDir():
		f.Close()
		return nil, 0, &driver.Error{Op: "read", Path: p, Kind: driver.ErrIsDir}
	case !fi.Mode().IsRegular():
		f.Close()
		return nil, 0, &driver.Error{Op: "read", Path: p, Kind: driver.ErrNotRegular}
	case maxBytes >= 0 && fi.Size() > maxBytes:
		f.Close()
		return nil, 0, &driver.TooLargeError{Path: p, Size: fi.Size(), MaxBytes: maxBytes}
	}
	return f, fi.Size(), nil
}

// WriteFile writes r to p with mode, creating parents.
func (*host) WriteFile(_ context.Context, _ string, p string, r io.Reader, mode fs.FileMode) error {
	if err := os.MkdirAll(path.Dir(p), 0o755); err != nil {
		return fileError("write", p, err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode.Perm())
	if err != nil {
		return fileError("write", p, err)
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return fileError("write", p, err)
	}
	if err := f.Close(); err != nil {
		return fileError("write", p, err)
	}
	return nil
}
