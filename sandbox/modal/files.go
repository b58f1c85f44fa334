package modal

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	modal "github.com/modal-labs/modal-client/go"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// Exit codes of the file scripts, as the Python provider's read/export
// scripts use them.
const (
	exitMissing    = 66
	exitIsDir      = 67
	exitNotRegular = 68
	exitTooLarge   = 69
)

// openScript checks the file, prints its size on the first stdout line and
// then streams at most $2+1 bytes of it ($2 < 0: all of it), so a file that
// grows while it is read is caught without reading it whole.
const openScript = `p=$1; max=$2
if [ ! -e "$p" ]; then exit 66; fi
if [ -d "$p" ]; then exit 67; fi
if [ ! -f "$p" ]; then exit 68; fi
size=$(stat -Lc %s -- "$p") || exit 66
if [ "$max" -ge 0 ] && [ "$size" -gt "$max" ]; then echo "$size" >&2; exit 69; fi
echo "$size"
if [ "$max" -ge 0 ]; then exec head -c "$((max + 1))" -- "$p"; fi
exec cat -- "$p"`

// OpenFile streams a regular file through one exec; nothing is buffered
// beyond what is in flight.
func (d *Driver) OpenFile(ctx context.Context, id, p string, maxBytes int64) (io.ReadCloser, int64, error) {
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	proc, err := d.start(ctx, id, []string{"sh", "-c", openScript, "sh", p, strconv.FormatInt(maxBytes, 10)},
		&modal.SandboxExecParams{}, nil, pw, &limitedWriter{w: &stderr, left: 4096})
	if err != nil {
		return nil, 0, err
	}
	done := make(chan struct{})
	var code int
	var waitErr error
	go func() {
		defer close(done)
		code, waitErr = proc.cp.Wait(context.WithoutCancel(ctx), nil)
		proc.copies.Wait()
		switch {
		case waitErr != nil:
			pw.CloseWithError(mapErr("read", id, waitErr))
		case code != 0:
			pw.CloseWithError(fileExitErr("read", id, p, code, stderr.String(), maxBytes))
		default:
			_ = pw.Close() // a pipe writer's Close never fails
		}
	}()
	br := bufio.NewReaderSize(pr, 64<<10)
	line, err := br.ReadString('\n')
	if err != nil {
		proc.abandon()
		pr.CloseWithError(err)
		<-done
		if waitErr != nil {
			return nil, 0, mapErr("read", id, waitErr)
		}
		if code != 0 {
			return nil, 0, fileExitErr("read", id, p, code, stderr.String(), maxBytes)
		}
		return nil, 0, &driver.Error{Op: "read", Sandbox: id, Path: p, Err: fmt.Errorf("no size line from the read script: %v", err)}
	}
	size, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	if err != nil {
		proc.abandon()
		pr.CloseWithError(err)
		<-done
		return nil, 0, &driver.Error{Op: "read", Sandbox: id, Path: p, Err: fmt.Errorf("bad size line %q", line)}
	}
	// The limit is enforced here too (the file may have grown since the
	// check); Close stops the exec's streams.
	stop := closeFunc(func() error {
		pr.CloseWithError(errors.New("file reader closed"))
		proc.abandon()
		return nil
	})
	return driver.LimitReader(br, stop, p, maxBytes), size, nil
}

type closeFunc func() error

func (f closeFunc) Close() error { return f() }

func fileExitErr(op, id, p string, code int, stderr string, maxBytes int64) error {
	e := &driver.Error{Op: op, Sandbox: id, Path: p}
	switch code {
	case exitMissing:
		e.Kind = driver.ErrNotFound
	case exitIsDir:
		e.Kind = driver.ErrIsDir
	case exitNotRegular:
		e.Kind = driver.ErrNotRegular
	case exitTooLarge:
		size, _ := strconv.ParseInt(strings.TrimSpace(stderr), 10, 64)
		return &driver.TooLargeError{Path: p, Size: size, MaxBytes: maxBytes}
	default:
		e.Err = fmt.Errorf("exit %d: %s", code, strings.TrimSpace(stderr))
	}
	return e
}

// writeScript streams stdin into a temporary file next to the target; the
// caller renames it into place (finishScript) only once every byte arrived,
// so a failed upload never leaves a truncated file behind.
const writeScript = `p=$1
if [ -d "$p" ] && [ ! -L "$p" ]; then exit 67; fi
d=$(dirname -- "$p")
mkdir -p -- "$d" || exit 70
t=$(mktemp "$d/.airflow-upload.XXXXXX") || exit 70
echo "$t"
cat > "$t" || { rm -f -- "$t"; exit 71; }`

// finishScript applies the mode and renames over the target, which
// replaces a symlink rather than writing through it.
const finishScript = `chmod "$3" -- "$1" && mv -f -- "$1" "$2"`

// WriteFile streams r into p through an exec's stdin. The SDK's filesystem
// API only takes a []byte (WriteBytes) or a local path (CopyFromLocal), so
// it would hold the whole file in memory; stdin streams.
func (d *Driver) WriteFile(ctx context.Context, id, p string, r io.Reader, mode fs.FileMode) error {
	var stdout, stderr bytes.Buffer
	cr := &countingReader{r: r}
	proc, err := d.start(ctx, id, []string{"sh", "-c", writeScript, "sh", p}, &modal.SandboxExecParams{},
		cr, &limitedWriter{w: &stdout, left: 4096}, &limitedWriter{w: &stderr, left: 4096})
	if err != nil {
		return err
	}
	code, err := proc.cp.Wait(ctx, nil)
	if err != nil {
		proc.abandon()
		return mapErr("write", id, err)
	}
	<-proc.stdin
	proc.copies.Wait()
	tmp := strings.TrimSpace(stdout.String())
	if code != 0 {
		return fileExitErr("write", id, p, code, stderr.String(), 0)
	}
	if cr.err != nil {
		d.cleanup(ctx, id, tmp)
		return &driver.Error{Op: "write", Sandbox: id, Path: p, Err: fmt.Errorf("reading the data to upload failed; nothing was written: %w", cr.err)}
	}
	var errb bytes.Buffer
	proc, err = d.start(ctx, id, []string{"sh", "-c", finishScript, "sh", tmp, p, fmt.Sprintf("%o", mode.Perm())},
		&modal.SandboxExecParams{}, nil, io.Discard, &limitedWriter{w: &errb, left: 4096})
	if err != nil {
		d.cleanup(ctx, id, tmp)
		return err
	}
	code, err = proc.cp.Wait(ctx, nil)
	proc.copies.Wait()
	if err == nil && code != 0 {
		err = fmt.Errorf("exit %d: %s", code, strings.TrimSpace(errb.String()))
	}
	if err != nil {
		d.cleanup(ctx, id, tmp)
		return &driver.Error{Op: "write", Sandbox: id, Path: p, Err: err}
	}
	return nil
}

// cleanup removes a temporary upload, best effort.
func (d *Driver) cleanup(ctx context.Context, id, tmp string) {
	if tmp == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	proc, err := d.start(ctx, id, []string{"rm", "-f", "--", tmp}, &modal.SandboxExecParams{}, nil, nil, nil)
	if err == nil {
		proc.cp.Wait(ctx, nil) //nolint:errcheck
		proc.copies.Wait()
	}
}

// countingReader remembers a read error, so a failed source is not taken
// for the end of the data.
type countingReader struct {
	r   io.Reader
	err error
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	if err != nil && err != io.EOF {
		c.err = err
		return n, io.EOF // end the upload; the caller discards it
	}
	return n, err
}

type limitedWriter struct {
	w    io.Writer
	left int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) > l.left {
		p = p[:l.left]
	}
	l.left -= len(p)
	if len(p) > 0 {
		l.w.Write(p) //nolint:errcheck // bytes.Buffer
	}
	return n, nil
}

// List lists a directory through the SDK's filesystem API, sorted by name.
func (d *Driver) List(ctx context.Context, id, p string) ([]driver.FileInfo, error) {
	sb, err := d.handle(ctx, id)
	if err != nil {
		return nil, err
	}
	entries, err := sb.Filesystem.ListFiles(ctx, p, nil)
	if err != nil {
		return nil, d.fsErr(ctx, "list", id, p, err)
	}
	out := make([]driver.FileInfo, 0, len(entries))
	for _, e := range entries {
		out = append(out, fromSDKInfo(p, e))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Stat describes p without following a final symlink.
func (d *Driver) Stat(ctx context.Context, id, p string) (driver.FileInfo, error) {
	sb, err := d.handle(ctx, id)
	if err != nil {
		return driver.FileInfo{}, err
	}
	fi, err := sb.Filesystem.Stat(ctx, p, nil)
	if err != nil {
		return driver.FileInfo{}, d.fsErr(ctx, "stat", id, p, err)
	}
	return fromSDKInfo(path.Dir(p), *fi), nil
}

// fsErr maps filesystem errors. The SDK turns "the sandbox has finished"
// into an opaque SandboxFilesystemError, so an untyped failure is checked
// against the sandbox's liveness.
func (d *Driver) fsErr(ctx context.Context, op, id, p string, err error) error {
	var (
		nf    modal.SandboxFilesystemNotFoundError
		isDir modal.SandboxFilesystemIsADirectoryError
	)
	switch {
	case errors.As(err, &nf):
		return &driver.Error{Op: op, Sandbox: id, Path: p, Kind: driver.ErrNotFound, Err: err}
	case errors.As(err, &isDir):
		return &driver.Error{Op: op, Sandbox: id, Path: p, Kind: driver.ErrIsDir, Err: err}
	}
	mapped := mapErr(op, id, err)
	if !isGone(mapped) {
		if alive, perr := d.alive(context.WithoutCancel(ctx), id); perr == nil && !alive {
			return &driver.Error{Op: op, Sandbox: id, Path: p, Kind: driver.ErrGone, Err: err}
		}
	}
	return mapped
}

// fromSDKInfo converts fs-tools metadata. Mode may carry st_mode type bits;
// when it does not, the type string decides.
func fromSDKInfo(dir string, e modal.FileInfo) driver.FileInfo {
	mode := fs.FileMode(e.Mode & 0o777)
	switch e.Mode & 0o170000 {
	case 0o040000:
		mode |= fs.ModeDir
	case 0o120000:
		mode |= fs.ModeSymlink
	case 0o010000:
		mode |= fs.ModeNamedPipe
	case 0o140000:
		mode |= fs.ModeSocket
	case 0o020000:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case 0o060000:
		mode |= fs.ModeDevice
	case 0:
		switch e.Type {
		case modal.FileTypeDirectory:
			mode |= fs.ModeDir
		case modal.FileTypeSymlink:
			mode |= fs.ModeSymlink
		}
	}
	name := e.Name
	if name == "" {
		name = path.Base(e.Path)
	}
	full := e.Path
	if full == "" {
		full = path.Join(dir, name)
	}
	var mt time.Time
	if e.ModifiedTime > 0 {
		mt = time.Unix(0, int64(e.ModifiedTime*1e9))
	}
	return driver.FileInfo{Name: name, Path: full, Size: e.Size, Mode: mode, ModTime: mt}
}
