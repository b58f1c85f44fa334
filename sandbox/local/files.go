package local

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/internal/randhex"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// File access works on the host, straight on the sandbox's own directories,
// for paths inside the workdir and /tmp (the only writable places). Each is
// opened as an os.Root, so ".." and symlinks can never lead outside it. A
// path elsewhere (the read-only system, /dev, /proc), or one whose symlinks
// point outside the sandbox's directories, is read from inside the sandbox
// with a small command instead, so it shows exactly what the sandbox sees
// and never the host's file at that path.

// area is a writable in-sandbox directory and its host directory.
type area struct {
	host string // host directory
	rel  string // path below it, "." for the directory itself
}

// locate maps an absolute in-sandbox path to the area holding it.
func (d *Driver) locate(m *meta, dir, p string) (area, bool) {
	p = cleanPath(m, p)
	for _, a := range []struct{ mount, host string }{
		{m.Spec.Workdir, d.hostArea(m, dir, workDir)}, // first: it may lie under /tmp
		{"/tmp", d.hostArea(m, dir, tmpDir)},
	} {
		if p == a.mount {
			return area{host: a.host, rel: "."}, true
		}
		if rest, ok := strings.CutPrefix(p, a.mount+"/"); ok {
			return area{host: a.host, rel: filepath.FromSlash(rest)}, true
		}
	}
	return area{}, false
}

func cleanPath(m *meta, p string) string {
	if !path.IsAbs(p) {
		p = path.Join(m.Spec.Workdir, p)
	}
	return path.Clean(p)
}

// escapes reports whether an os.Root refused a path because it (through a
// symlink) leads outside the root.
func escapes(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}

// fileErr turns an OS error into the typed sandbox error.
func fileErr(op, id, p string, err error) error {
	e := &driver.Error{Op: op, Sandbox: id, Path: p, Err: err}
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		e.Kind, e.Err = driver.ErrNotFound, nil
	case errors.Is(err, syscall.EISDIR):
		e.Kind, e.Err = driver.ErrIsDir, nil
	}
	return e
}

// OpenFile opens a regular file for a streaming read.
func (d *Driver) OpenFile(ctx context.Context, id, p string, maxBytes int64) (io.ReadCloser, int64, error) {
	m, dir, err := d.liveMeta("read", id)
	if err != nil {
		return nil, 0, err
	}
	if err := d.ensureDisk(m, dir); err != nil {
		return nil, 0, &driver.Error{Op: "read", Sandbox: id, Err: err}
	}
	p = cleanPath(m, p)
	a, ok := d.locate(m, dir, p)
	if !ok {
		return d.openInSandbox(ctx, id, m, dir, p, maxBytes)
	}
	root, err := os.OpenRoot(a.host)
	if err != nil {
		return nil, 0, fileErr("read", id, p, err)
	}
	defer root.Close() // files opened from it stay open
	// Check the type before opening: opening a fifo would block.
	st, err := root.Stat(a.rel)
	if escapes(err) {
		return d.openInSandbox(ctx, id, m, dir, p, maxBytes)
	}
	if err != nil {
		return nil, 0, fileErr("read", id, p, err)
	}
	if err := checkRegular(id, p, st.Mode()); err != nil {
		return nil, 0, err
	}
	// O_NONBLOCK: should the path have become a fifo since, do not block.
	f, err := root.OpenFile(a.rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, 0, fileErr("read", id, p, err)
	}
	if st, err = f.Stat(); err != nil {
		f.Close()
		return nil, 0, fileErr("read", id, p, err)
	}
	if err := checkRegular(id, p, st.Mode()); err != nil {
		f.Close()
		return nil, 0, err
	}
	if maxBytes >= 0 && st.Size() > maxBytes {
		f.Close()
		return nil, 0, &driver.Error{Op: "read", Sandbox: id, Path: p, Err: &driver.TooLargeError{Path: p, Size: st.Size(), MaxBytes: maxBytes}}
	}
	return driver.LimitReader(f, f, p, maxBytes), st.Size(), nil
}

func checkRegular(id, p string, mode fs.FileMode) error {
	switch {
	case mode.IsDir():
		return &driver.Error{Op: "read", Sandbox: id, Path: p, Kind: driver.ErrIsDir,
			Err: errors.New("is a directory; list it instead of reading it")}
	case !mode.IsRegular():
		return &driver.Error{Op: "read", Sandbox: id, Path: p, Kind: driver.ErrNotRegular,
			Err: fmt.Errorf("is not a regular file (%s); only regular files can be read", mode.Type())}
	}
	return nil
}

// WriteFile streams r into p through a temporary file in the same
// directory, renamed into place: readers never see half a file, and a
// symlink at p is replaced rather than written through.
func (d *Driver) WriteFile(ctx context.Context, id, p string, r io.Reader, mode fs.FileMode) error {
	m, dir, err := d.liveMeta("write", id)
	if err != nil {
		return err
	}
	if err := d.diskReady(m, dir); err != nil {
		return &driver.Error{Op: "write", Sandbox: id, Path: p, Err: err}
	}
	p = cleanPath(m, p)
	a, ok := d.locate(m, dir, p)
	if !ok || a.rel == "." {
		return &driver.Error{Op: "write", Sandbox: id, Path: p,
			Err: fmt.Errorf("only files under the workdir %s or /tmp can be written; the rest of the local sandbox is read-only", m.Spec.Workdir)}
	}
	root, err := os.OpenRoot(a.host)
	if err != nil {
		return fileErr("write", id, p, err)
	}
	defer root.Close()
	parent := filepath.Dir(a.rel)
	if err := root.MkdirAll(parent, 0o755); err != nil {
		if escapes(err) {
			return &driver.Error{Op: "write", Sandbox: id, Path: p, Err: errors.New("a symlink on the way leads outside the sandbox's writable directories; write to a path without it")}
		}
		if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrExist) {
			return &driver.Error{Op: "write", Sandbox: id, Path: p, Err: errors.New("a parent of the path is not a directory; remove that file or choose another path")}
		}
		return fileErr("write", id, p, err)
	}
	sbIDs := d.sandboxIDs(m)
	if err := giveParentsToSandbox(root, parent, sbIDs); err != nil {
		return fileErr("write", id, p, err)
	}
	if st, err := root.Lstat(a.rel); err == nil && st.IsDir() {
		return &driver.Error{Op: "write", Sandbox: id, Path: p, Kind: driver.ErrIsDir, Err: errors.New("is a directory; write to a file path inside it")}
	}
	tmp := filepath.Join(parent, "."+filepath.Base(a.rel)+".tmp-"+randhex.String(6))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode.Perm())
	if err != nil {
		if isNoSpace(err) {
			lim := d.limitsOf(m)
			return &driver.Error{Op: "write", Sandbox: id, Path: p, Err: fmt.Errorf("no file can be created: the sandbox's workdir and /tmp are full (disk_mib %d MiB, %d files and directories); remove files in the sandbox, or raise disk_mib (or disk_inodes) in the local backend's bundle config", lim.DiskMiB, lim.DiskInodes)}
		}
		return fileErr("write", id, p, err)
	}
	err = copyChunked(ctx, f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil { // before the mode: a chown clears setuid bits
		err = giveToSandbox(root, tmp, sbIDs)
	}
	if err == nil {
		err = root.Chmod(tmp, mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)) // not narrowed by the umask
	}
	if err == nil {
		err = root.Rename(tmp, a.rel)
	}
	if err != nil {
		root.Remove(tmp)
		if isNoSpace(err) {
			lim := d.limitsOf(m)
			return &driver.Error{Op: "write", Sandbox: id, Path: p, Err: fmt.Errorf("the file does not fit: the sandbox's workdir and /tmp are full (disk_mib %d MiB, %d files and directories); remove files in the sandbox, or raise disk_mib (or disk_inodes) in the local backend's bundle config", lim.DiskMiB, lim.DiskInodes)}
		}
		return fileErr("write", id, p, err)
	}
	return nil
}

// copyChunked copies r into f in large chunks, checking ctx between them.
// Each chunk is a plain io.Copy into the file, so a host file source goes
// through copy_file_range. The sandbox's filesystem ends a file that does
// not fit (ENOSPC).
func copyChunked(ctx context.Context, f *os.File, r io.Reader) error {
	const chunk = 8 << 20
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := io.Copy(f, &io.LimitedReader{R: r, N: chunk})
		if err != nil || n < chunk {
			return err
		}
	}
}

// Stat describes p without following a final symlink.
func (d *Driver) Stat(ctx context.Context, id, p string) (driver.FileInfo, error) {
	m, dir, err := d.liveMeta("stat", id)
	if err != nil {
		return driver.FileInfo{}, err
	}
	if err := d.ensureDisk(m, dir); err != nil {
		return driver.FileInfo{}, &driver.Error{Op: "stat", Sandbox: id, Err: err}
	}
	p = cleanPath(m, p)
	a, ok := d.locate(m, dir, p)
	if !ok {
		return d.statInSandbox(ctx, id, m, dir, p)
	}
	root, err := os.OpenRoot(a.host)
	if err != nil {
		return driver.FileInfo{}, fileErr("stat", id, p, err)
	}
	defer root.Close()
	st, err := root.Lstat(a.rel)
	if escapes(err) {
		return d.statInSandbox(ctx, id, m, dir, p)
	}
	if err != nil {
		return driver.FileInfo{}, fileErr("stat", id, p, err)
	}
	return fileInfo(p, st), nil
}

func fileInfo(p string, st fs.FileInfo) driver.FileInfo {
	return driver.FileInfo{Name: path.Base(p), Path: p, Size: st.Size(), Mode: st.Mode(), ModTime: st.ModTime()}
}

// List lists a directory, sorted by name.
func (d *Driver) List(ctx context.Context, id, p string) ([]driver.FileInfo, error) {
	m, dir, err := d.liveMeta("list", id)
	if err != nil {
		return nil, err
	}
	if err := d.ensureDisk(m, dir); err != nil {
		return nil, &driver.Error{Op: "list", Sandbox: id, Err: err}
	}
	p = cleanPath(m, p)
	a, ok := d.locate(m, dir, p)
	if !ok {
		return d.listInSandbox(ctx, id, m, dir, p)
	}
	root, err := os.OpenRoot(a.host)
	if err != nil {
		return nil, fileErr("list", id, p, err)
	}
	defer root.Close()
	st, err := root.Stat(a.rel)
	if escapes(err) {
		return d.listInSandbox(ctx, id, m, dir, p)
	}
	if err != nil {
		return nil, fileErr("list", id, p, err)
	}
	if !st.IsDir() {
		return nil, notDir(id, p)
	}
	f, err := root.Open(a.rel)
	if err != nil {
		return nil, fileErr("list", id, p, err)
	}
	defer f.Close()
	entries, err := f.Readdir(-1) // lstat of each entry
	if err != nil {
		return nil, fileErr("list", id, p, err)
	}
	out := make([]driver.FileInfo, 0, len(entries))
	for _, e := range entries {
		out = append(out, fileInfo(path.Join(p, e.Name()), e))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func notDir(id, p string) error {
	return &driver.Error{Op: "list", Sandbox: id, Path: p, Err: errors.New("is not a directory; read it as a file instead")}
}

// Exit codes of the in-sandbox helper scripts.
const (
	exitMissing    = 66
	exitIsDir      = 67
	exitNotRegular = 68
	exitNotDir     = 69
)

// helperTimeout bounds the in-sandbox stat and list helpers.
const helperTimeout = 2 * time.Minute

// runHelper runs a shell script with p as $1 and returns its stdout.
func (d *Driver) runHelper(ctx context.Context, id string, m *meta, dir, op, p, script string) ([]byte, error) {
	var out, errb bytes.Buffer
	res, err := d.run(ctx, id, m, dir, runSpec{
		argv: []string{"/bin/sh", "-c", script, "sh", p}, cwd: "/", stdout: &out, stderr: &errb, timeout: helperTimeout,
	})
	if err != nil {
		return nil, err
	}
	switch {
	case res.SandboxLost:
		return nil, &driver.Error{Op: op, Sandbox: id, Path: p, Kind: driver.ErrGone, Err: errors.New("sandbox was destroyed")}
	case res.TimedOut:
		return nil, driver.Retryable(&driver.Error{Op: op, Sandbox: id, Path: p, Err: fmt.Errorf("timed out after %v", res.AppliedTimeout)})
	case res.ExitCode == exitMissing:
		return nil, &driver.Error{Op: op, Sandbox: id, Path: p, Kind: driver.ErrNotFound}
	case res.ExitCode == exitIsDir:
		return nil, checkRegular(id, p, fs.ModeDir)
	case res.ExitCode == exitNotRegular:
		return nil, checkRegular(id, p, fs.ModeIrregular)
	case res.ExitCode == exitNotDir:
		return nil, notDir(id, p)
	case res.ExitCode != 0:
		return nil, &driver.Error{Op: op, Sandbox: id, Path: p, Err: fmt.Errorf("exit %d: %s", res.ExitCode, strings.TrimSpace(errb.String()))}
	}
	return out.Bytes(), nil
}

// statScript prints "<raw mode hex> <size> <mtime>" per path, using only
// POSIX sh and stat -c (coreutils and busybox alike).
const statScript = `[ -e "$1" ] || [ -L "$1" ] || exit 66; stat -c '%f %s %Y' -- "$1"`

func (d *Driver) statInSandbox(ctx context.Context, id string, m *meta, dir, p string) (driver.FileInfo, error) {
	out, err := d.runHelper(ctx, id, m, dir, "stat", p, statScript)
	if err != nil {
		return driver.FileInfo{}, err
	}
	fi, err := parseStatLine(p, strings.TrimSpace(string(out)))
	if err != nil {
		return driver.FileInfo{}, &driver.Error{Op: "stat", Sandbox: id, Path: p, Err: err}
	}
	return fi, nil
}

func parseStatLine(p, line string) (driver.FileInfo, error) {
	f := strings.Fields(line)
	if len(f) != 3 {
		return driver.FileInfo{}, fmt.Errorf("unexpected stat output %q", line)
	}
	raw, err1 := strconv.ParseUint(f[0], 16, 32)
	size, err2 := strconv.ParseInt(f[1], 10, 64)
	mtime, err3 := strconv.ParseInt(f[2], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return driver.FileInfo{}, fmt.Errorf("unexpected stat output %q: %v", line, err)
	}
	return driver.FileInfo{Name: path.Base(p), Path: p, Size: size, Mode: unixMode(uint32(raw)), ModTime: time.Unix(mtime, 0)}, nil
}

// unixMode converts a raw st_mode to fs.FileMode type and permission bits.
func unixMode(raw uint32) fs.FileMode {
	mode := fs.FileMode(raw & 0o777)
	switch raw & syscall.S_IFMT {
	case syscall.S_IFDIR:
		mode |= fs.ModeDir
	case syscall.S_IFLNK:
		mode |= fs.ModeSymlink
	case syscall.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case syscall.S_IFSOCK:
		mode |= fs.ModeSocket
	case syscall.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFBLK:
		mode |= fs.ModeDevice
	}
	if raw&syscall.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if raw&syscall.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if raw&syscall.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// listScript prints, per entry, "<mode> <size> <mtime>\n<name>\0": names may
// hold newlines, never NUL.
const listScript = `[ -e "$1" ] || exit 66; [ -d "$1" ] || exit 69; cd -- "$1" || exit 1
for f in .* *; do
  case "$f" in .|..) continue;; esac
  [ -e "$f" ] || [ -L "$f" ] || continue
  stat -c '%f %s %Y' -- "$f" || exit 1
  printf '%s\0' "$f"
done`

func (d *Driver) listInSandbox(ctx context.Context, id string, m *meta, dir, p string) ([]driver.FileInfo, error) {
	out, err := d.runHelper(ctx, id, m, dir, "list", p, listScript)
	if err != nil {
		return nil, err
	}
	var list []driver.FileInfo
	br := bufio.NewReader(bytes.NewReader(out))
	for {
		line, err := br.ReadString('\n')
		if err == io.EOF && line == "" {
			break
		}
		name, err2 := br.ReadString(0)
		if err != nil || err2 != nil {
			return nil, &driver.Error{Op: "list", Sandbox: id, Path: p, Err: fmt.Errorf("unexpected listing output near %q", line)}
		}
		name = strings.TrimSuffix(name, "\x00")
		fi, err := parseStatLine(path.Join(p, name), strings.TrimSpace(line))
		if err != nil {
			return nil, &driver.Error{Op: "list", Sandbox: id, Path: p, Err: err}
		}
		list = append(list, fi)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	return list, nil
}

// sizeScript checks the path as the sandbox sees it (following symlinks)
// and prints its size.
const sizeScript = `[ -e "$1" ] || exit 66; [ -d "$1" ] && exit 67; [ -f "$1" ] || exit 68; wc -c < "$1"`

// openInSandbox streams a file the host side cannot reach safely through
// cat inside the sandbox. Closing the reader kills the command.
func (d *Driver) openInSandbox(ctx context.Context, id string, m *meta, dir, p string, maxBytes int64) (io.ReadCloser, int64, error) {
	out, err := d.runHelper(ctx, id, m, dir, "read", p, sizeScript)
	if err != nil {
		return nil, 0, err
	}
	size, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return nil, 0, &driver.Error{Op: "read", Sandbox: id, Path: p, Err: fmt.Errorf("unexpected size %q", out)}
	}
	if maxBytes >= 0 && size > maxBytes {
		return nil, 0, &driver.Error{Op: "read", Sandbox: id, Path: p, Err: &driver.TooLargeError{Path: p, Size: size, MaxBytes: maxBytes}}
	}
	pr, pw := io.Pipe()
	runCtx, cancel := context.WithCancel(context.Background())
	go func() {
		var errb bytes.Buffer
		res, err := d.run(runCtx, id, m, dir, runSpec{
			argv: []string{"/bin/sh", "-c", `exec cat -- "$1"`, "sh", p}, cwd: "/",
			stdout: pw, stderr: &errb, timeout: driver.MaxLifetime,
		})
		if err == nil && (res.ExitCode != 0 || res.TimedOut || res.SandboxLost) {
			err = &driver.Error{Op: "read", Sandbox: id, Path: p, Err: fmt.Errorf("reading inside the sandbox failed (exit %d): %s", res.ExitCode, strings.TrimSpace(errb.String()))}
		}
		pw.CloseWithError(err) // nil: EOF
	}()
	closer := closerFunc(func() error { cancel(); return pr.Close() })
	return driver.LimitReader(pr, closer, p, maxBytes), size, nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }
