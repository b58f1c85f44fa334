package fakeopensandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// Execd's file routes, as execd built from OpenSandbox's source answers
// them (status, body, error text), recorded in testdata/sdk-*.json and
// docs/opensandbox-execd.md. Files are changed by small sh scripts inside
// the backing sandbox, so that paths, symlinks and permissions are the
// sandbox's own:
//
//   - Uploads open the path with truncation and follow a symlink there,
//     writing into its target (onto a symlink to a directory: 500). Parent
//     directories are created. Multipart parts are matched by index within
//     each field name and both need filename=; the whole form is read
//     before anything is written (Gin parses it first), so a cut upload
//     changes no file. A mode of non-octal digits is a 500 after the file
//     was written. Without a mode a new file gets 0755. Without an owner
//     the file is chowned to execd's user; an unknown owner is only logged.
//   - POST /directories is mkdir -p, then the mode is applied to the
//     directory even when it existed (a /tmp of 1777 becomes 0755).
//   - DELETE /files stats through symlinks: a symlink to a directory is 500
//     RUNTIME_ERROR "path is a directory", a dangling one is left in place
//     (200), missing paths are ignored, no path at all is 200.
//     DELETE /directories removes recursively, a symlink itself only.
//   - GET /files/info without path: 200 {}; any missing path fails the
//     whole call. VersionV1018 stats through symlinks, gives no type and
//     answers a missing path (or a dangling link) with 500 RUNTIME_ERROR;
//     VersionMain lstats, gives the type and answers 404 FILE_NOT_FOUND.
//   - GET /directories/list exists only in VersionMain.
//   - Download: offset/limit are ignored (the whole file). A Range that
//     execd cannot parse: 416 with Content-Length: <size>, at most its JSON
//     error as the body, then the connection is closed. A range that does
//     not overlap: 416 text/plain with Content-Range: bytes */N. A Range on
//     an empty file: 200, empty. A directory: 200 with Content-Length
//     2^63-1, then the connection is closed.
//   - Deterministic failures are 500 RUNTIME_ERROR.
//
// With the local backend only the workdir and /tmp persist: writes
// elsewhere answer 500 "read-only file system".

// resolve makes an execd path absolute: relative paths and ~ resolve
// against the backing workdir (execd's cwd and HOME here).
func (s *Server) resolve(p string) string {
	switch {
	case p == "":
		return ""
	case p == "~" || strings.HasPrefix(p, "~/"):
		p = s.opts.Workdir + p[1:]
	case !path.IsAbs(p):
		p = path.Join(s.opts.Workdir, p)
	}
	return path.Clean(p)
}

// writable reports whether p lies where the backing sandbox keeps files.
func (s *Server) writable(p string) bool {
	if s.writableAll {
		return true
	}
	for _, dir := range []string{s.opts.Workdir, "/tmp"} {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			return true
		}
	}
	return false
}

// shResult is how a helper script ended.
type shResult struct {
	code   int
	stderr string
	gone   bool  // the sandbox went away
	runErr error // the script could not be run
}

func (r shResult) err() error {
	switch {
	case r.runErr != nil:
		return r.runErr
	case r.gone:
		return sandbox.ErrGone
	case r.code != 0:
		return fmt.Errorf("exit %d: %s", r.code, r.stderr)
	}
	return nil
}

// reason is the OS's reason at the end of the script's stderr ("sh: 1:
// cannot create x: Is a directory" -> "is a directory"), in Go's words.
func (r shResult) reason() string {
	msg := strings.TrimSpace(r.stderr)
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	if msg == "" {
		return "failed"
	}
	return strings.ToLower(msg[:1]) + msg[1:]
}

// sh runs script inside the backing sandbox with args as $1..., stdin
// from a host file (nil: none).
func (s *Server) sh(ctx context.Context, b *sbx, script string, stdin *os.File, args ...string) shResult {
	var q strings.Builder
	q.WriteString("set --")
	for _, a := range args {
		q.WriteString(" " + quote(a))
	}
	q.WriteString("\n" + script)
	var errOut bytes.Buffer
	req := sandbox.ExecRequest{Command: q.String(), Timeout: 10 * time.Minute, Workdir: "/", Stdout: io.Discard, Stderr: &errOut}
	if stdin != nil {
		req.Stdin = stdin
	}
	res, err := s.drv.Exec(ctx, b.id, req)
	switch {
	case res.SandboxLost || errors.Is(err, sandbox.ErrGone):
		return shResult{gone: true}
	case err != nil:
		return shResult{runErr: err}
	case res.TimedOut:
		return shResult{runErr: errors.New("timed out")}
	}
	return shResult{code: res.ExitCode, stderr: errOut.String()}
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// runtimeError answers a failed script: 502 when the sandbox is gone (the
// proxy finds nothing), else execd's 500 RUNTIME_ERROR.
func runtimeError(w http.ResponseWriter, r shResult, msg string) {
	if r.gone {
		http.Error(w, "Bad Gateway", http.StatusBadGateway)
		return
	}
	execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", msg)
}

// notExist is Go's text for an operation on a path that does not exist.
func notExist(op, p string) string { return op + " " + p + ": no such file or directory" }

// fileMissing answers as execd's handleFileError does for a path that does
// not exist: 404 FILE_NOT_FOUND "file not found. <Go's error>".
func fileMissing(w http.ResponseWriter, goErr string) {
	execdError(w, http.StatusNotFound, "FILE_NOT_FOUND", "file not found. "+goErr)
}

// backingError answers a failure of the backing sandbox: 502 when it is
// gone (the proxy finds nothing), else execd's 500.
func backingError(w http.ResponseWriter, err error) {
	if errors.Is(err, sandbox.ErrGone) {
		http.Error(w, "Bad Gateway", http.StatusBadGateway)
		return
	}
	execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "error accessing file: "+err.Error())
}

// scriptMode reads execd's mode convention (octal digits as a decimal
// number, 644; 0: none) into chmod's argument, failing with strconv's text
// as execd does.
func scriptMode(n int) (string, error) {
	if n == 0 {
		return "", nil
	}
	v, err := strconv.ParseUint(strconv.Itoa(n), 8, 32)
	if err != nil {
		return "", err
	}
	return strconv.FormatUint(v, 8), nil
}

func modeDigits(m fs.FileMode) int {
	n, _ := strconv.Atoi(strconv.FormatUint(uint64(m.Perm()), 8))
	return n
}

// ---- upload

type uploadMeta struct {
	Path  string `json:"path"`
	Mode  int    `json:"mode"`
	Owner string `json:"owner"`
	Group string `json:"group"`
}

// Exit codes of the file scripts.
const (
	exitIsDir     = 21
	exitNotDir    = 22
	exitFailed    = 23
	exitNoOwner   = 24
	exitReadOnly  = 25
	exitChownFail = 26
)

// ownerScript is execd's SetFileOwnership on $p: an owner or group that
// does not exist is only logged, and with neither the file goes to execd's
// own user.
const ownerScript = `
uid=-1 gid=-1
[ -n "$owner" ] && { uid=$(id -u -- "$owner" 2>/dev/null) || uid=-1; }
[ -n "$group" ] && { gid=$(getent group -- "$group" 2>/dev/null | cut -d: -f3); [ -n "$gid" ] || gid=-1; }
if [ "$uid" = -1 ] && [ "$gid" = -1 ]; then uid=$(id -u) gid=$(id -g); fi
spec=
[ "$uid" = -1 ] || spec=$uid
[ "$gid" = -1 ] || spec=$spec:$gid
chown -- "$spec" "$p" || exit 26`

// notDirScript prints, as os.MkdirAll names it, the path that stops a
// mkdir -p of $1: the nearest one on the way that exists and is not a
// directory.
const notDirScript = `q=$1
while [ ! -e "$q" ] && [ "$q" != / ]; do q=$(dirname -- "$q"); done
printf '%s' "$q" >&2`

// uploadScript writes stdin to $p as execd does: parents created, the path
// opened with truncation, following a symlink there; then the mode (new
// files get 0777 less the umask) and the owner.
const uploadScript = `p=$1 mode=$2 owner=$3 group=$4
[ -d "$p" ] && exit 21
d=$(dirname -- "$p")
mkdir -p -- "$d" 2>/dev/null || { set -- "$d"; ` + notDirScript + `; exit 22; }
[ -e "$p" ] || mode=${mode:-755}
cat > "$p" || exit 23
[ -z "$mode" ] || chmod -- "$mode" "$p" || exit 23` + ownerScript

// cutReader fails once left bytes have been read (CutNextUpload).
type cutReader struct {
	r    io.Reader
	left int64
}

var errCut = errors.New("cut by the test")

func (c *cutReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errCut
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

func (s *Server) upload(w http.ResponseWriter, r *http.Request, b *sbx) {
	s.mu.Lock()
	cut := s.cutUp
	s.cutUp = 0
	s.mu.Unlock()
	var cr *cutReader
	if cut > 0 {
		cr = &cutReader{r: r.Body, left: cut}
		r.Body = io.NopCloser(cr)
	}
	// A cut upload drops the connection: the client sees its request fail.
	cutNow := func() {
		if cr != nil && cr.left <= 0 {
			panic(http.ErrAbortHandler)
		}
	}
	mr, err := r.MultipartReader()
	if err != nil {
		execdError(w, http.StatusBadRequest, "INVALID_FILE", "multipart form is empty")
		return
	}
	// Read the whole form first, file parts spooled to disk, as Gin does.
	var metas []uploadMeta
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			cutNow()
			execdError(w, http.StatusBadRequest, "INVALID_FILE", "multipart form is empty")
			return
		}
		if part.FileName() == "" {
			// A plain form value: not in the form's file table, where execd
			// looks for both parts.
			io.Copy(io.Discard, part)
			cutNow()
			continue
		}
		switch part.FormName() {
		case "metadata":
			var m uploadMeta
			data, _ := io.ReadAll(io.LimitReader(part, 1<<16))
			cutNow()
			if err := json.Unmarshal(data, &m); err != nil {
				execdError(w, http.StatusBadRequest, "INVALID_FILE_METADATA", "invalid metadata format. "+err.Error())
				return
			}
			metas = append(metas, m)
		case "file":
			f, err := os.CreateTemp(s.spool, "upload-")
			if err != nil {
				execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", err.Error())
				return
			}
			files = append(files, f)
			if _, err := io.Copy(f, part); err != nil {
				cutNow()
				execdError(w, http.StatusBadRequest, "INVALID_FILE", "multipart form is empty")
				return
			}
		default:
			io.Copy(io.Discard, part)
			cutNow()
		}
	}
	switch {
	case len(metas) == 0:
		execdError(w, http.StatusBadRequest, "INVALID_FILE_METADATA", "metadata file is missing")
		return
	case len(files) == 0:
		execdError(w, http.StatusBadRequest, "INVALID_FILE_CONTENT", "file is missing")
		return
	case len(metas) != len(files):
		execdError(w, http.StatusBadRequest, "INVALID_FILE", fmt.Sprintf("metadata and file count mismatch: %d vs %d", len(metas), len(files)))
		return
	}
	for i, m := range metas {
		if m.Path == "" {
			execdError(w, http.StatusBadRequest, "INVALID_FILE_METADATA", "metadata path is empty")
			return
		}
		if !s.writeOne(w, r, b, m, files[i]) {
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// writeOne writes one uploaded file; false when it answered an error.
func (s *Server) writeOne(w http.ResponseWriter, r *http.Request, b *sbx, m uploadMeta, f *os.File) bool {
	p := s.resolve(m.Path)
	openFailed := func(why string) bool {
		execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", fmt.Sprintf("error opening destination file %s. open %s: %s", p, p, why))
		return false
	}
	if !s.writable(p) {
		return openFailed("read-only file system")
	}
	mode, modeErr := scriptMode(m.Mode)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", err.Error())
		return false
	}
	res := s.sh(r.Context(), b, uploadScript, f, p, mode, m.Owner, m.Group)
	switch {
	case res.gone || res.runErr != nil:
		runtimeError(w, res, fmt.Sprintf("error opening destination file %s. %v", p, res.err()))
		return false
	case res.code == exitIsDir:
		return openFailed("is a directory")
	case res.code == exitNotDir:
		d := path.Dir(p)
		execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", fmt.Sprintf("error creating target directory %s. mkdir %s: not a directory", d, res.stderr))
		return false
	case res.code != 0:
		return openFailed(res.reason())
	case modeErr != nil: // execd parses the mode only after writing the file
		execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", fmt.Sprintf("error chmoding file %s. %v", p, modeErr))
		return false
	}
	return true
}

// ---- directories and deletes

// mkdirScript is execd's MakeDir: mkdir -p, then the mode applied to the
// directory whether or not it is new, then the owner.
const mkdirScript = `p=$1 mode=$2 owner=$3 group=$4
mkdir -p -- "$p" 2>/dev/null || { ` + notDirScript + `; exit 22; }
[ -d "$p" ] || { printf '%s' "$p" >&2; exit 22; }
[ -z "$mode" ] || chmod -- "$mode" "$p" || exit 23` + ownerScript

// bindError answers a body execd cannot decode, in Gin's words.
func bindError(w http.ResponseWriter, err error) {
	execdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "error parsing request, MAYBE invalid body format. "+err.Error())
}

// permission is execd's {mode, owner, group} of a path.
type permission struct {
	Mode  int    `json:"mode"`
	Owner string `json:"owner"`
	Group string `json:"group"`
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request, b *sbx) {
	var body map[string]permission
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		bindError(w, err)
		return
	}
	for raw, o := range body {
		p := s.resolve(raw)
		if !s.writable(p) {
			execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", fmt.Sprintf("error accessing file: mkdir %s: read-only file system", p))
			return
		}
		mode, modeErr := scriptMode(o.Mode)
		res := s.sh(r.Context(), b, mkdirScript, nil, p, mode, o.Owner, o.Group)
		switch {
		case res.gone || res.runErr != nil:
			runtimeError(w, res, fmt.Sprintf("error accessing file: %v", res.err()))
			return
		case res.code == exitNotDir:
			execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", fmt.Sprintf("error accessing file: mkdir %s: not a directory", res.stderr))
			return
		case res.code != 0:
			execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", fmt.Sprintf("error accessing file: mkdir %s: %s", p, res.reason()))
			return
		case modeErr != nil:
			execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "error accessing file: "+modeErr.Error())
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// deleteFileScript is execd's DELETE /files for one path: the type check
// follows symlinks, and a path that does not resolve is left alone.
const deleteFileScript = `p=$1 ro=$2
[ -d "$p" ] && exit 21
[ -e "$p" ] || exit 0
[ "$ro" = 1 ] && exit 25
rm -f -- "$p" || exit 23`

func (s *Server) deleteFiles(w http.ResponseWriter, r *http.Request, b *sbx) {
	for _, raw := range r.URL.Query()["path"] {
		p := s.resolve(raw)
		res := s.sh(r.Context(), b, deleteFileScript, nil, p, readOnlyFlag(s.writable(p)))
		failed := func(why string) {
			runtimeError(w, res, fmt.Sprintf("error removing file %s. %s", raw, why))
		}
		switch {
		case res.gone || res.runErr != nil:
			failed(res.err().Error())
		case res.code == exitIsDir:
			failed("path is a directory: " + raw)
		case res.code == exitReadOnly:
			failed(fmt.Sprintf("failed to remove file: remove %s: read-only file system", p))
		case res.code != 0:
			failed(fmt.Sprintf("failed to remove file: remove %s: %s", p, res.reason()))
		default:
			continue
		}
		return
	}
	w.WriteHeader(http.StatusOK) // no path at all is fine too
}

const deleteDirScript = `p=$1 ro=$2
[ -e "$p" ] || [ -L "$p" ] || exit 0
[ "$ro" = 1 ] && exit 25
rm -rf -- "$p" || exit 23`

func (s *Server) deleteDirs(w http.ResponseWriter, r *http.Request, b *sbx) {
	for _, raw := range r.URL.Query()["path"] { // no path at all is fine
		p := s.resolve(raw)
		res := s.sh(r.Context(), b, deleteDirScript, nil, p, readOnlyFlag(s.writable(p)))
		failed := func(why string) {
			runtimeError(w, res, fmt.Sprintf("error removing directory %s. %s", raw, why))
		}
		switch {
		case res.gone || res.runErr != nil:
			failed(res.err().Error())
		case res.code == exitReadOnly:
			failed(fmt.Sprintf("unlinkat %s: read-only file system", p))
		case res.code != 0:
			failed(fmt.Sprintf("unlinkat %s: %s", p, res.reason()))
		default:
			continue
		}
		return
	}
	w.WriteHeader(http.StatusOK)
}

func readOnlyFlag(writable bool) string {
	if writable {
		return ""
	}
	return "1"
}

// ---- reading

type fileInfo struct {
	Path       string    `json:"path"`
	Type       string    `json:"type,omitempty"` // not sent by VersionV1018
	Size       int64     `json:"size"`
	ModifiedAt time.Time `json:"modified_at"`
	CreatedAt  time.Time `json:"created_at"`
	Owner      string    `json:"owner"`
	Group      string    `json:"group"`
	Mode       int       `json:"mode"`
}

// typed reports whether this build's file entries carry a type.
func (s *Server) typed() bool { return s.opts.Version != VersionV1018 }

func (s *Server) toInfo(fi sandbox.FileInfo, p string) fileInfo {
	t := ""
	if s.typed() {
		t = "other"
		switch {
		case fi.Mode.IsRegular():
			t = "file"
		case fi.Mode.IsDir():
			t = "directory"
		case fi.Mode&fs.ModeSymlink != 0:
			t = "symlink"
		}
	}
	return fileInfo{Path: p, Type: t, Size: fi.Size, ModifiedAt: fi.ModTime, CreatedAt: fi.ModTime, Owner: "root", Group: "root", Mode: modeDigits(fi.Mode)}
}

// statFollow stats p through symlinks, as os.Stat does.
func (s *Server) statFollow(ctx context.Context, b *sbx, p string) (sandbox.FileInfo, error) {
	var out bytes.Buffer
	res, err := s.drv.Exec(ctx, b.id, sandbox.ExecRequest{
		Command: "set -- " + quote(p) + "\n[ -e \"$1\" ] || exit 3\nLC_ALL=C stat -L -c '%s|%a|%Y|%F' -- \"$1\"",
		Timeout: time.Minute, Workdir: "/", Stdout: &out, Stderr: io.Discard,
	})
	switch {
	case err != nil:
		return sandbox.FileInfo{}, err
	case res.ExitCode == 3:
		return sandbox.FileInfo{}, sandbox.ErrNotFound
	case res.ExitCode != 0:
		return sandbox.FileInfo{}, fmt.Errorf("stat %s: exit %d", p, res.ExitCode)
	}
	f := strings.Split(strings.TrimSpace(out.String()), "|")
	if len(f) != 4 {
		return sandbox.FileInfo{}, fmt.Errorf("stat %s: %q", p, out.String())
	}
	size, _ := strconv.ParseInt(f[0], 10, 64)
	perm, _ := strconv.ParseUint(f[1], 8, 32)
	mtime, _ := strconv.ParseInt(f[2], 10, 64)
	mode := fs.FileMode(perm) & fs.ModePerm
	switch f[3] {
	case "directory":
		mode |= fs.ModeDir
	case "regular file", "regular empty file":
	default:
		mode |= fs.ModeIrregular
	}
	return sandbox.FileInfo{Name: path.Base(p), Path: p, Size: size, Mode: mode, ModTime: time.Unix(mtime, 0)}, nil
}

func (s *Server) info(w http.ResponseWriter, r *http.Request, b *sbx) {
	out := map[string]fileInfo{} // no path: 200 {}
	for _, raw := range r.URL.Query()["path"] {
		p := s.resolve(raw)
		fi, err := s.drv.Stat(r.Context(), b.id, p) // lstat
		if !s.typed() {
			// os.Stat, and its "not found" wrapped so that execd does not
			// recognise it: a 500.
			if err == nil && fi.Mode&fs.ModeSymlink != 0 {
				fi, err = s.statFollow(r.Context(), b, p)
			}
			if errors.Is(err, sandbox.ErrNotFound) {
				execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "error accessing file: file not found: "+raw)
				return
			}
		} else if errors.Is(err, sandbox.ErrNotFound) {
			fileMissing(w, "file not found: "+raw+": "+notExist("lstat", p))
			return
		}
		if err != nil {
			backingError(w, err)
			return
		}
		out[raw] = s.toInfo(fi, p)
	}
	execdJSON(w, http.StatusOK, out)
}

// listDir is GET /directories/list (VersionMain only): entries in
// os.ReadDir's order (by name), each directory's own entries right after
// it, down to depth; symlinks are not followed, nor accepted as the root.
func (s *Server) listDir(w http.ResponseWriter, r *http.Request, b *sbx) {
	if !s.typed() {
		unknownRoute(w)
		return
	}
	raw := r.URL.Query().Get("path")
	if raw == "" {
		execdError(w, http.StatusBadRequest, "MISSING_QUERY", "missing query parameter 'path'")
		return
	}
	depth := 1
	if d := r.URL.Query().Get("depth"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			execdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "invalid query parameter 'depth': "+d)
			return
		}
		depth = n
	}
	p := s.resolve(raw)
	fi, err := s.drv.Stat(r.Context(), b.id, p)
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		fileMissing(w, notExist("lstat", p))
		return
	case err != nil:
		backingError(w, err)
		return
	case fi.Mode&fs.ModeSymlink != 0:
		execdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "path is a symbolic link, refusing to traverse: "+p)
		return
	case !fi.IsDir():
		execdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "path is not a directory: "+p)
		return
	}
	out := []fileInfo{}
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		entries, err := s.drv.List(r.Context(), b.id, dir)
		if err != nil {
			return err
		}
		sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
		for _, e := range entries {
			ep := path.Join(dir, e.Name)
			out = append(out, s.toInfo(e, ep))
			if e.IsDir() && level+1 < depth {
				if err := walk(ep, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if depth > 0 {
		if err := walk(p, 0); err != nil {
			execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", fmt.Sprintf("error listing directory %s. %v", p, err))
			return
		}
	}
	execdJSON(w, http.StatusOK, out)
}

// contentDisposition is execd's header for a download of name.
func contentDisposition(name string) string {
	for _, r := range name {
		if r > 127 {
			enc := url.PathEscape(name)
			return "attachment; filename=\"" + enc + "\"; filename*=UTF-8''" + enc
		}
	}
	return "attachment; filename=\"" + name + "\""
}

// abortAfter sends what was written so far and closes the connection, as
// Go's server does after a handler that wrote less than its
// Content-Length.
func abortAfter(w http.ResponseWriter) {
	w.(http.Flusher).Flush()
	panic(http.ErrAbortHandler)
}

func (s *Server) download(w http.ResponseWriter, r *http.Request, b *sbx) {
	raw := r.URL.Query().Get("path")
	if raw == "" {
		execdError(w, http.StatusBadRequest, "MISSING_QUERY", "missing query parameter 'path'")
		return
	}
	p := s.resolve(raw)
	rng := r.Header.Get("Range")
	rc, size, err := s.drv.OpenFile(r.Context(), b.id, p, -1)
	isDir := errors.Is(err, sandbox.ErrIsDir)
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		fileMissing(w, notExist("open", p))
		return
	case err != nil && !isDir:
		backingError(w, err)
		return
	}
	if rc != nil {
		defer rc.Close()
	}
	var mtime time.Time
	if fi, err := s.drv.Stat(r.Context(), b.id, p); err == nil {
		mtime = fi.ModTime
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", contentDisposition(path.Base(p)))
	if isDir && s.opts.OverlayFS {
		// http.ServeContent seeks to the end to learn the size, which
		// overlayfs refuses for a directory.
		http.Error(w, "seeker can't seek", http.StatusInternalServerError)
		return
	}
	if isDir {
		// http.ServeContent on a directory: its size from seeking to the
		// end, then a read that fails, and the connection is closed.
		h.Set("Accept-Ranges", "bytes")
		h.Set("Last-Modified", mtime.UTC().Format(http.TimeFormat))
		h.Set("Content-Length", strconv.FormatInt(math.MaxInt64, 10))
		w.WriteHeader(http.StatusOK)
		abortAfter(w)
	}
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	var ranges []byteRange
	if rng != "" {
		if ranges, err = parseRanges(rng, size); err != nil {
			// execd's JSON error under the file's Content-Length: Go's server
			// refuses a body longer than that, and closes the connection
			// after one shorter.
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			if body := `{"code":"UNKNOWN","message":""}`; int64(len(body)) <= size {
				io.WriteString(w, body)
			}
			abortAfter(w)
		}
	}
	s.mu.Lock()
	fault := s.downFault
	s.downFault = downloadFault{}
	s.mu.Unlock()
	switch fault.kind {
	case cutBetween:
		defer func() { panic(http.ErrAbortHandler) }()
		w = &cutWriter{ResponseWriter: w, left: fault.after}
	case stall:
		w = &stallWriter{ResponseWriter: w, left: fault.after, hold: func() { s.hold(r, b) }}
	}
	if len(ranges) > 0 { // execd serves the first range itself
		rg := ranges[0]
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", rg.start, rg.start+rg.length-1, size))
		h.Set("Content-Length", strconv.FormatInt(rg.length, 10))
		if _, err := io.CopyN(io.Discard, rc, rg.start); err != nil {
			abortAfter(w)
		}
		w.WriteHeader(http.StatusPartialContent)
		io.CopyN(w, rc, rg.length)
		return
	}
	// http.ServeContent: a Range on an empty file is ignored; one that
	// overlaps nothing is a 416.
	if rng != "" && size > 0 {
		h.Del("Content-Length")
		h.Set("Content-Range", fmt.Sprintf("bytes */%d", size))
		http.Error(w, "invalid range: failed to overlap", http.StatusRequestedRangeNotSatisfiable)
		return
	}
	h.Set("Accept-Ranges", "bytes")
	h.Set("Last-Modified", mtime.UTC().Format(http.TimeFormat))
	w.WriteHeader(http.StatusOK)
	io.CopyN(w, rc, size)
}

// byteRange is one range of a Range header.
type byteRange struct{ start, length int64 }

var errInvalidRange = errors.New("invalid range")

// parseRanges reads a Range header as execd's own parser does: ranges
// that start past the end are dropped, a malformed one fails the header.
func parseRanges(h string, size int64) ([]byteRange, error) {
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok {
		return nil, errInvalidRange
	}
	var out []byteRange
	for _, ra := range strings.Split(spec, ",") {
		ra = strings.TrimSpace(ra)
		if ra == "" {
			continue
		}
		a, z, ok := strings.Cut(ra, "-")
		if !ok {
			return nil, errInvalidRange
		}
		a, z = strings.TrimSpace(a), strings.TrimSpace(z)
		var r byteRange
		if a == "" { // the last z bytes
			n, err := strconv.ParseInt(z, 10, 64)
			if err != nil || n < 0 {
				return nil, errInvalidRange
			}
			n = min(n, size)
			r = byteRange{size - n, n}
		} else {
			i, err := strconv.ParseInt(a, 10, 64)
			if err != nil || i < 0 {
				return nil, errInvalidRange
			}
			r = byteRange{i, size - i}
			if z != "" {
				j, err := strconv.ParseInt(z, 10, 64)
				if err != nil || j < i {
					return nil, errInvalidRange
				}
				r.length = j - i + 1
			}
		}
		if r.start >= size {
			continue
		}
		r.length = min(r.length, size-r.start)
		out = append(out, r)
	}
	return out, nil
}

// cutWriter stops passing bytes on after left of them.
type cutWriter struct {
	http.ResponseWriter
	left int64
}

func (c *cutWriter) Write(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errStreamClosed
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.ResponseWriter.Write(p)
	c.left -= int64(n)
	c.Flush()
	if err == nil && c.left <= 0 {
		err = errStreamClosed
	}
	return n, err
}

func (c *cutWriter) Flush() { c.ResponseWriter.(http.Flusher).Flush() }

// stallWriter passes left bytes on, then holds the response open.
type stallWriter struct {
	http.ResponseWriter
	left int64
	hold func()
}

func (c *stallWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.ResponseWriter.Write(p)
	c.left -= int64(n)
	c.Flush()
	if err == nil && c.left <= 0 {
		c.hold()
		panic(http.ErrAbortHandler)
	}
	return n, err
}

func (c *stallWriter) Flush() { c.ResponseWriter.(http.Flusher).Flush() }

var errStreamClosed = errors.New("stream closed")
