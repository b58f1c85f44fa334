package fakeopensandbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// Execd's file routes, as the real builds behave (spec section 2 and its
// appendix). Files are changed by small sh scripts inside the backing
// sandbox, so that paths, symlinks and permissions are the sandbox's own:
//
//   - Uploads open the path with truncation and follow a symlink there,
//     writing into its target (onto a symlink to a directory: 500). Parent
//     directories are created. Multipart parts are matched by index within
//     each field name and both need filename=; the whole form is read
//     before anything is written (Gin parses it first), so a cut upload
//     changes no file. A mode of non-octal digits is a 500 after the file
//     was written. Without a mode a new file gets 0755.
//   - DELETE /files stats through symlinks: a symlink to a directory is 500
//     RUNTIME_ERROR "path is a directory", a dangling one is left in place
//     (200), missing paths are ignored, no path at all is 200.
//     DELETE /directories removes recursively, a symlink itself only.
//   - POST /directories: 1.0.18 re-applies the mode to an existing
//     directory and chowns it (and every upload or mkdir without owner) to
//     execd's user; 1.0.19 leaves an existing directory alone. An unknown
//     owner is a warning (200) on 1.0.18 and a 500 on 1.0.19. Mkdir over a
//     file: 500.
//   - Download: offset/limit (lines) only on 1.0.19, ignored by 1.0.18.
//     A Range on an empty file: 200, empty. A range that does not overlap:
//     416 text/plain with Content-Range: bytes */N. A malformed Range: 416
//     with Content-Length: <size> and no body, the connection held open. A
//     directory: 200 with Content-Length 2^63-1 and no body, held open too.
//   - GET /files/info without path: 200 {}; any missing path: 404 for the
//     whole call. GET /directories/list on a symlink: 400 "refusing to
//     traverse"; on a file: 400 INVALID_REQUEST_BODY "path is not a
//     directory".
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

// fileError maps a backing driver's error onto execd's answers.
func fileError(w http.ResponseWriter, p string, err error) {
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		execdError(w, http.StatusNotFound, "FILE_NOT_FOUND", "file not found: "+p)
	case errors.Is(err, sandbox.ErrGone):
		http.Error(w, "Bad Gateway", http.StatusBadGateway)
	default:
		execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", err.Error())
	}
}

// modeFromDigits reads execd's mode convention (octal digits as a decimal
// number, 644).
func modeFromDigits(n int) (fs.FileMode, error) {
	v, err := strconv.ParseUint(strconv.Itoa(n), 8, 32)
	if err != nil || v > 0o7777 {
		return 0, fmt.Errorf("invalid mode %d: not octal digits", n)
	}
	return fs.FileMode(v), nil
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

// ownerScript applies $owner:$group to $p, or on 1.0.18 ($chownself=1)
// execd's own user when no owner is given.
const ownerScript = `
if [ -n "$owner" ]; then
  id -u -- "$owner" >/dev/null 2>&1 || { echo "unknown user $owner" >&2; exit 24; }
  chown -- "$owner${group:+:$group}" "$p" || exit 26
elif [ "$chownself" = 1 ]; then
  chown -- "$(id -u):$(id -g)" "$p" || exit 26
fi`

// uploadScript writes stdin to $p as execd does: parents created, the path
// opened with truncation, following a symlink there.
const uploadScript = `p=$1 mode=$2 owner=$3 group=$4 chownself=$5
[ -d "$p" ] && { echo "is a directory" >&2; exit 21; }
d=$(dirname -- "$p")
mkdir -p -- "$d" 2>/dev/null || [ -d "$d" ] || { echo "not a directory" >&2; exit 22; }
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
		execdError(w, http.StatusBadRequest, "INVALID_FILE", "request is not multipart/form-data: "+err.Error())
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
			execdError(w, http.StatusBadRequest, "INVALID_FILE", "reading the multipart form: "+err.Error())
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
				execdError(w, http.StatusBadRequest, "INVALID_FILE_METADATA", "invalid metadata: "+err.Error())
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
				execdError(w, http.StatusBadRequest, "INVALID_FILE", "reading the file part: "+err.Error())
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
		execdError(w, http.StatusBadRequest, "INVALID_FILE", "file is missing")
		return
	case len(metas) != len(files):
		execdError(w, http.StatusBadRequest, "INVALID_FILE", fmt.Sprintf("%d metadata parts for %d files", len(metas), len(files)))
		return
	}
	for i, m := range metas {
		if m.Path == "" {
			execdError(w, http.StatusBadRequest, "INVALID_FILE_METADATA", "metadata has no path")
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
	if !s.writable(p) {
		execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", fmt.Sprintf("open %s: read-only file system", p))
		return false
	}
	mode, modeErr := "", error(nil)
	if m.Mode != 0 {
		var fm fs.FileMode
		if fm, modeErr = modeFromDigits(m.Mode); modeErr == nil {
			mode = strconv.FormatUint(uint64(fm), 8)
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", err.Error())
		return false
	}
	res := s.sh(r.Context(), b, uploadScript, f, p, mode, m.Owner, m.Group, s.chownSelf())
	switch res.code {
	case 0:
	case exitIsDir:
		runtimeError(w, res, fmt.Sprintf("open %s: is a directory", p))
		return false
	case exitNotDir:
		runtimeError(w, res, fmt.Sprintf("mkdir %s: not a directory", path.Dir(p)))
		return false
	case exitNoOwner:
		if s.opts.Version == Version1018 {
			s.log.Warn("fake execd: unknown owner, file left to execd's user", "path", p, "owner", m.Owner)
			break
		}
		runtimeError(w, res, fmt.Sprintf("unknown user %s", m.Owner))
		return false
	default:
		if res.runErr != nil || res.gone {
			runtimeError(w, res, fmt.Sprintf("open %s: %v", p, res.err()))
		} else {
			runtimeError(w, res, fmt.Sprintf("open %s: %s", p, res.reason()))
		}
		return false
	}
	if modeErr != nil { // execd parses the mode only after writing the file
		execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", modeErr.Error())
		return false
	}
	return true
}

func (s *Server) chownSelf() string {
	if s.opts.Version == Version1018 {
		return "1"
	}
	return ""
}

// ---- directories and deletes

// mkdirScript is execd's mkdir -p; with $reapply=1 (1.0.18) an existing
// directory gets the mode again.
const mkdirScript = `p=$1 mode=$2 owner=$3 group=$4 chownself=$5 reapply=$6
mkdir -p -m "$mode" -- "$p" 2>/dev/null || [ -d "$p" ] || { echo "not a directory" >&2; exit 22; }
[ "$reapply" = 1 ] && { chmod -- "$mode" "$p" || exit 23; }` + ownerScript

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request, b *sbx) {
	var body map[string]struct {
		Mode  int    `json:"mode"`
		Owner string `json:"owner"`
		Group string `json:"group"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body) == 0 {
		execdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "body must map paths to {mode, owner, group}")
		return
	}
	reapply := ""
	if s.opts.Version == Version1018 {
		reapply = "1"
	}
	for raw, o := range body {
		p := s.resolve(raw)
		mode := fs.FileMode(0o755)
		if o.Mode != 0 {
			var err error
			if mode, err = modeFromDigits(o.Mode); err != nil {
				execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", err.Error())
				return
			}
		}
		if !s.writable(p) {
			execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", fmt.Sprintf("mkdir %s: read-only file system", p))
			return
		}
		res := s.sh(r.Context(), b, mkdirScript, nil, p, strconv.FormatUint(uint64(mode), 8), o.Owner, o.Group, s.chownSelf(), reapply)
		switch res.code {
		case 0:
		case exitNotDir:
			runtimeError(w, res, fmt.Sprintf("mkdir %s: not a directory", p))
			return
		case exitNoOwner:
			if s.opts.Version == Version1018 {
				s.log.Warn("fake execd: unknown owner, directory left to execd's user", "path", p, "owner", o.Owner)
				continue
			}
			runtimeError(w, res, "unknown user "+o.Owner)
			return
		default:
			if res.runErr != nil || res.gone {
				runtimeError(w, res, fmt.Sprintf("mkdir %s: %v", p, res.err()))
			} else {
				runtimeError(w, res, fmt.Sprintf("mkdir %s: %s", p, res.reason()))
			}
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
		if !s.deleted(w, res, p) {
			return
		}
	}
	w.WriteHeader(http.StatusOK) // no path at all is fine too
}

const deleteDirScript = `p=$1 ro=$2
[ -e "$p" ] || [ -L "$p" ] || exit 0
[ "$ro" = 1 ] && exit 25
rm -rf -- "$p" || exit 23`

func (s *Server) deleteDirs(w http.ResponseWriter, r *http.Request, b *sbx) {
	paths := r.URL.Query()["path"]
	if len(paths) == 0 {
		execdError(w, http.StatusBadRequest, "MISSING_QUERY", "missing query parameter path")
		return
	}
	for _, raw := range paths {
		p := s.resolve(raw)
		res := s.sh(r.Context(), b, deleteDirScript, nil, p, readOnlyFlag(s.writable(p)))
		if !s.deleted(w, res, p) {
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func readOnlyFlag(writable bool) string {
	if writable {
		return ""
	}
	return "1"
}

// deleted answers a failed delete script; false when it answered.
func (s *Server) deleted(w http.ResponseWriter, res shResult, p string) bool {
	switch res.code {
	case 0:
		if res.gone || res.runErr != nil {
			runtimeError(w, res, fmt.Sprintf("remove %s: %v", p, res.err()))
			return false
		}
		return true
	case exitIsDir:
		runtimeError(w, res, "path is a directory: "+p)
	case exitReadOnly:
		runtimeError(w, res, fmt.Sprintf("remove %s: read-only file system", p))
	default:
		runtimeError(w, res, fmt.Sprintf("remove %s: %s", p, res.reason()))
	}
	return false
}

// ---- reading

type fileInfo struct {
	Path       string    `json:"path"`
	Type       string    `json:"type"`
	Size       int64     `json:"size"`
	ModifiedAt time.Time `json:"modified_at"`
	CreatedAt  time.Time `json:"created_at"`
	Owner      string    `json:"owner"`
	Group      string    `json:"group"`
	Mode       int       `json:"mode"`
}

func toInfo(fi sandbox.FileInfo, p string) fileInfo {
	t := "other"
	switch {
	case fi.Mode.IsRegular():
		t = "file"
	case fi.Mode.IsDir():
		t = "directory"
	case fi.Mode&fs.ModeSymlink != 0:
		t = "symlink"
	}
	return fileInfo{Path: p, Type: t, Size: fi.Size, ModifiedAt: fi.ModTime, CreatedAt: fi.ModTime, Owner: "root", Group: "root", Mode: modeDigits(fi.Mode)}
}

func (s *Server) info(w http.ResponseWriter, r *http.Request, b *sbx) {
	out := map[string]fileInfo{} // no path: 200 {}
	for _, raw := range r.URL.Query()["path"] {
		p := s.resolve(raw)
		fi, err := s.drv.Stat(r.Context(), b.id, p) // lstat
		if err != nil {
			fileError(w, raw, err)
			return
		}
		out[raw] = toInfo(fi, p)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) listDir(w http.ResponseWriter, r *http.Request, b *sbx) {
	raw := r.URL.Query().Get("path")
	if raw == "" {
		execdError(w, http.StatusBadRequest, "MISSING_QUERY", "missing query parameter path")
		return
	}
	depth := 1
	if d := r.URL.Query().Get("depth"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			execdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "depth must be a number >= 0")
			return
		}
		depth = n
	}
	p := s.resolve(raw)
	fi, err := s.drv.Stat(r.Context(), b.id, p)
	switch {
	case err != nil:
		fileError(w, raw, err)
		return
	case fi.Mode&fs.ModeSymlink != 0:
		execdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "refusing to traverse symlink "+p)
		return
	case !fi.IsDir():
		execdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "path is not a directory: "+p)
		return
	}
	out := []fileInfo{}
	var walk func(dir string, left int) error
	walk = func(dir string, left int) error {
		if left == 0 {
			return nil
		}
		entries, err := s.drv.List(r.Context(), b.id, dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			ep := path.Join(dir, e.Name)
			out = append(out, toInfo(e, ep))
			if e.IsDir() { // symlinks are not followed
				if err := walk(ep, left-1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(p, depth); err != nil {
		fileError(w, raw, err)
		return
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) download(w http.ResponseWriter, r *http.Request, b *sbx) {
	q := r.URL.Query()
	raw := q.Get("path")
	if raw == "" {
		execdError(w, http.StatusBadRequest, "MISSING_QUERY", "missing query parameter path")
		return
	}
	p := s.resolve(raw)
	rng := r.Header.Get("Range")
	lines := s.opts.Version != Version1018 && (q.Has("offset") || q.Has("limit"))
	if lines && rng != "" {
		execdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "offset/limit cannot be combined with a Range header")
		return
	}
	rc, size, err := s.drv.OpenFile(r.Context(), b.id, p, -1)
	if errors.Is(err, sandbox.ErrIsDir) {
		// http.ServeContent on a directory: the size from seeking to its
		// end, then nothing.
		w.Header().Set("Content-Length", strconv.FormatInt(math.MaxInt64, 10))
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		s.hold(r, b)
		return
	}
	if err != nil {
		fileError(w, raw, err)
		return
	}
	defer rc.Close()
	if lines {
		s.serveLines(w, rc, q)
		return
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
	w.Header().Set("Accept-Ranges", "bytes")
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", path.Base(p)))
	if rng == "" || size == 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		w.WriteHeader(http.StatusOK)
		io.CopyN(w, rc, size)
		return
	}
	from, to, verdict := parseRange(rng, size)
	switch verdict {
	case rangeMalformed:
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
		w.(http.Flusher).Flush()
		s.hold(r, b)
		return
	case rangeNoOverlap:
		w.Header().Del("Content-Disposition")
		w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", size))
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
		io.WriteString(w, "invalid range: failed to overlap\n")
		return
	}
	if _, err := io.CopyN(io.Discard, rc, from); err != nil {
		execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", err.Error())
		return
	}
	w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, to, size))
	w.Header().Set("Content-Length", strconv.FormatInt(to-from+1, 10))
	w.WriteHeader(http.StatusPartialContent)
	io.CopyN(w, rc, to-from+1)
}

// serveLines answers 1.0.19's offset (first line, 1-based) and limit
// (number of lines) as text.
func (s *Server) serveLines(w http.ResponseWriter, rc io.Reader, q map[string][]string) {
	num := func(name string, def int) (int, bool) {
		v := ""
		if vs := q[name]; len(vs) > 0 {
			v = vs[0]
		}
		if v == "" {
			return def, true
		}
		n, err := strconv.Atoi(v)
		return n, err == nil && n >= 0
	}
	offset, ok1 := num("offset", 1)
	limit, ok2 := num("limit", -1)
	if !ok1 || !ok2 {
		execdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "offset and limit must be numbers >= 0")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	br := bufio.NewReader(rc)
	for n := 1; limit != 0; n++ {
		line, err := br.ReadString('\n')
		if n >= offset && line != "" {
			io.WriteString(w, line)
			if limit > 0 {
				limit--
			}
		}
		if err != nil {
			return
		}
	}
}

type rangeVerdict int

const (
	rangeOK rangeVerdict = iota
	rangeMalformed
	rangeNoOverlap
)

// parseRange reads a Range header as Go's http.ServeContent does and
// returns its first range that overlaps the file (execd serves only that).
func parseRange(h string, size int64) (from, to int64, v rangeVerdict) {
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok {
		return 0, 0, rangeMalformed
	}
	found := false
	for _, ra := range strings.Split(spec, ",") {
		ra = strings.TrimSpace(ra)
		if ra == "" {
			continue
		}
		a, z, ok := strings.Cut(ra, "-")
		if !ok {
			return 0, 0, rangeMalformed
		}
		a, z = strings.TrimSpace(a), strings.TrimSpace(z)
		var f, t int64
		if a == "" { // suffix: the last z bytes
			n, err := strconv.ParseInt(z, 10, 64)
			if err != nil || n < 0 {
				return 0, 0, rangeMalformed
			}
			f, t = max(size-n, 0), size-1
			if n == 0 {
				continue
			}
		} else {
			var err error
			if f, err = strconv.ParseInt(a, 10, 64); err != nil || f < 0 {
				return 0, 0, rangeMalformed
			}
			t = size - 1
			if z != "" {
				if t, err = strconv.ParseInt(z, 10, 64); err != nil || t < f {
					return 0, 0, rangeMalformed
				}
				t = min(t, size-1)
			}
			if f >= size {
				continue // does not overlap
			}
		}
		if !found {
			from, to, found = f, t, true
		}
	}
	if !found {
		return 0, 0, rangeNoOverlap
	}
	return from, to, rangeOK
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
