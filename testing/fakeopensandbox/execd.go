package fakeopensandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// command is one command run through POST /command.
type command struct {
	content     string
	cancel      context.CancelFunc
	done        chan struct{}
	interrupted bool
	exitCode    int
	err         string
	startedAt   time.Time
}

// event is one execd stream event.
type event struct {
	Type          string      `json:"type"`
	Text          string      `json:"text,omitempty"`
	ExecutionTime int64       `json:"execution_time,omitempty"`
	Timestamp     int64       `json:"timestamp"`
	Error         *eventError `json:"error,omitempty"`
}

type eventError struct {
	Name      string   `json:"ename"`
	Value     string   `json:"evalue"`
	Traceback []string `json:"traceback"`
}

func execdError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, apiError{Code: code, Message: msg})
}

// fileError maps a backing driver's error onto execd's answers.
func fileError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		execdError(w, http.StatusNotFound, "FILE_NOT_FOUND", err.Error())
	case errors.Is(err, sandbox.ErrGone):
		http.Error(w, "Bad Gateway", http.StatusBadGateway)
	default:
		execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", err.Error())
	}
}

func (s *Server) serveExecd(w http.ResponseWriter, r *http.Request, b *sbx, sub string) {
	route := func(name string) bool { return s.injected(name, w) }
	switch {
	case r.Method == http.MethodGet && sub == "/ping":
		if !route(RoutePing) {
			w.WriteHeader(http.StatusOK)
		}
	case r.Method == http.MethodPost && sub == "/command":
		if !route(RouteCommand) {
			s.runCommand(w, r, b)
		}
	case r.Method == http.MethodDelete && sub == "/command":
		if !route(RouteInterrupt) {
			s.interrupt(w, r, b)
		}
	case r.Method == http.MethodGet && strings.HasPrefix(sub, "/command/status/"):
		s.status(w, b, strings.TrimPrefix(sub, "/command/status/"))
	case r.Method == http.MethodPost && sub == "/files/upload":
		if !route(RouteUpload) {
			s.upload(w, r, b)
		}
	case r.Method == http.MethodGet && sub == "/files/download":
		if !route(RouteDownload) {
			s.download(w, r, b)
		}
	case r.Method == http.MethodGet && sub == "/files/info":
		if !route(RouteInfo) {
			s.info(w, r, b)
		}
	case r.Method == http.MethodGet && sub == "/directories/list":
		if !route(RouteListDir) {
			s.listDir(w, r, b)
		}
	case r.Method == http.MethodPost && sub == "/directories":
		if !route(RouteMkdir) {
			s.mkdir(w, r, b)
		}
	case r.Method == http.MethodDelete && (sub == "/files" || sub == "/directories"):
		if !route(RouteDeleteFiles) {
			s.deleteFiles(w, r, b, sub == "/directories")
		}
	default:
		w.WriteHeader(http.StatusNotFound) // execd: empty body for unknown routes
	}
}

// lineSplitter turns a byte stream into one event per line, as execd does:
// the newline is dropped, an empty line is sent as "\n", and a final
// partial line is flushed at the end.
type lineSplitter struct {
	typ  string
	emit func(event) error
	buf  []byte
}

func (l *lineSplitter) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexAny(l.buf, "\r\n")
		if i < 0 {
			return len(p), nil
		}
		line := string(l.buf[:i])
		skip := 1
		if l.buf[i] == '\r' && i+1 < len(l.buf) && l.buf[i+1] == '\n' {
			skip = 2
		} else if l.buf[i] == '\r' && i+1 == len(l.buf) {
			return len(p), nil // wait: this \r may start a \r\n
		}
		l.buf = l.buf[i+skip:]
		if line == "" {
			line = "\n"
		}
		if err := l.emit(event{Type: l.typ, Text: line}); err != nil {
			return 0, err
		}
	}
}

func (l *lineSplitter) flush() error {
	rest := strings.TrimSuffix(string(l.buf), "\r")
	l.buf = nil
	if rest == "" {
		return nil
	}
	return l.emit(event{Type: l.typ, Text: rest})
}

var errStreamClosed = errors.New("stream closed")

func (s *Server) runCommand(w http.ResponseWriter, r *http.Request, b *sbx) {
	var req struct {
		Command string            `json:"command"`
		Cwd     string            `json:"cwd"`
		Timeout int64             `json:"timeout"`
		Envs    map[string]string `json:"envs"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		execdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "invalid request body: "+err.Error())
		return
	}
	if req.Command == "" {
		execdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "command is required")
		return
	}
	if req.Cwd != "" {
		fi, err := s.drv.Stat(r.Context(), b.id, req.Cwd)
		if err != nil || !fi.IsDir() {
			execdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", fmt.Sprintf("cwd %s is not a directory", req.Cwd))
			return
		}
	}
	timeout := time.Duration(req.Timeout) * time.Millisecond
	if timeout <= 0 {
		timeout = sandbox.MaxTimeout
	}
	s.mu.Lock()
	dropAfter := s.drop
	s.drop = 0
	vanish := s.vanish
	s.vanish = false
	s.mu.Unlock()

	cmdID := randHex(16)
	ctx, cancel := context.WithCancel(context.Background()) // a disconnect does not stop it, as in execd
	cmd := &command{content: req.Command, cancel: cancel, done: make(chan struct{}), startedAt: time.Now()}
	s.mu.Lock()
	b.cmds[cmdID] = cmd
	s.mu.Unlock()

	// Events go from the command's writers to this handler through a
	// bounded channel; once the handler has gone, they are dropped.
	events := make(chan event, 64)
	handlerGone := make(chan struct{})
	defer close(handlerGone)
	var emitMu sync.Mutex
	emit := func(ev event) error {
		emitMu.Lock()
		defer emitMu.Unlock()
		ev.Timestamp = time.Now().UnixMilli()
		select {
		case events <- ev:
			return nil
		case <-handlerGone:
			return errStreamClosed
		}
	}
	stdout := &lineSplitter{typ: "stdout", emit: emit}
	stderr := &lineSplitter{typ: "stderr", emit: emit}
	go func() {
		defer cancel()
		defer close(cmd.done)
		emit(event{Type: "init", Text: cmdID})
		emit(event{Type: "ping", Text: "pong"})
		res, err := s.drv.Exec(ctx, b.id, sandbox.ExecRequest{
			Command: req.Command, Timeout: timeout, Env: req.Envs, Workdir: req.Cwd,
			Stdout: stdout, Stderr: stderr,
		})
		stdout.flush()
		stderr.flush()
		s.mu.Lock()
		interrupted := cmd.interrupted
		s.mu.Unlock()
		var final event
		switch {
		case res.SandboxLost || errors.Is(err, sandbox.ErrGone):
			return // the sandbox is gone: no terminal event, the stream breaks
		case interrupted:
			final = event{Type: "error", Error: &eventError{Name: "CommandExecError", Value: "-1", Traceback: []string{"signal: terminated"}}}
			cmd.exitCode = -1
		case res.TimedOut:
			final = event{Type: "error", Error: &eventError{Name: "CommandExecError", Value: "-1", Traceback: []string{"signal: killed"}}}
			cmd.exitCode = -1
		case err != nil:
			final = event{Type: "error", Error: &eventError{Name: "CommandExecError", Value: err.Error(), Traceback: []string{err.Error()}}}
			cmd.err = err.Error()
		case res.ExitCode != 0:
			final = event{Type: "error", Error: &eventError{Name: "CommandExecError", Value: strconv.Itoa(res.ExitCode), Traceback: []string{fmt.Sprintf("exit status %d", res.ExitCode)}}}
			cmd.exitCode = res.ExitCode
		default:
			final = event{Type: "execution_complete", ExecutionTime: res.Duration.Milliseconds()}
		}
		emit(final)
		close(events)
	}()

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	sent := 0
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return
			}
			if vanish && (ev.Type == "stdout" || ev.Type == "stderr") {
				s.remove(b.id)
			}
			data, _ := json.Marshal(ev)
			if _, err := w.Write(append(data, '\n', '\n')); err != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
			sent++
			if dropAfter > 0 && sent >= dropAfter {
				panic(http.ErrAbortHandler) // cut the connection mid-stream
			}
		case <-b.gone:
			panic(http.ErrAbortHandler)
		case <-s.closing:
			cancel()
			panic(http.ErrAbortHandler)
		case <-r.Context().Done():
			return
		}
	}
}

func (s *Server) interrupt(w http.ResponseWriter, r *http.Request, b *sbx) {
	id := r.URL.Query().Get("id")
	if id == "" {
		execdError(w, http.StatusBadRequest, "MISSING_QUERY", "missing query parameter id")
		return
	}
	s.mu.Lock()
	cmd, ok := b.cmds[id]
	running := false
	if ok {
		select {
		case <-cmd.done:
		default:
			running = true
			cmd.interrupted = true
		}
	}
	s.mu.Unlock()
	switch {
	case !ok:
		execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "no such session: "+id)
	case !running:
		execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "command "+id+" is not running")
	default:
		cmd.cancel()
		w.WriteHeader(http.StatusOK)
	}
}

func (s *Server) status(w http.ResponseWriter, b *sbx, id string) {
	s.mu.Lock()
	cmd, ok := b.cmds[id]
	s.mu.Unlock()
	if !ok {
		execdError(w, http.StatusNotFound, "INVALID_REQUEST_BODY", "command not found: "+id)
		return
	}
	running := true
	select {
	case <-cmd.done:
		running = false
	default:
	}
	out := map[string]any{"id": id, "content": cmd.content, "running": running, "started_at": cmd.startedAt}
	if !running {
		out["exit_code"] = cmd.exitCode
		if cmd.err != "" {
			out["error"] = cmd.err
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// modeFromDigits reads execd's mode convention (octal digits as a decimal
// number, 644).
func modeFromDigits(n int) (fs.FileMode, error) {
	v, err := strconv.ParseUint(strconv.Itoa(n), 8, 32)
	if err != nil {
		return 0, fmt.Errorf("mode %d is not octal digits", n)
	}
	return fs.FileMode(v) & fs.ModePerm, nil
}

func modeDigits(m fs.FileMode) int {
	n, _ := strconv.Atoi(strconv.FormatUint(uint64(m.Perm()), 8))
	return n
}

func (s *Server) upload(w http.ResponseWriter, r *http.Request, b *sbx) {
	mr, err := r.MultipartReader()
	if err != nil {
		execdError(w, http.StatusBadRequest, "INVALID_FILE", "request is not multipart/form-data: "+err.Error())
		return
	}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			w.WriteHeader(http.StatusOK)
			return
		}
		if err != nil {
			execdError(w, http.StatusBadRequest, "INVALID_FILE", err.Error())
			return
		}
		if part.FormName() != "metadata" || part.FileName() == "" {
			execdError(w, http.StatusBadRequest, "INVALID_FILE_METADATA", "metadata file is missing")
			return
		}
		var meta struct {
			Path string `json:"path"`
			Mode int    `json:"mode"`
		}
		if err := json.NewDecoder(io.LimitReader(part, 1<<16)).Decode(&meta); err != nil || meta.Path == "" {
			execdError(w, http.StatusBadRequest, "INVALID_FILE_METADATA", "metadata is not {path, mode}")
			return
		}
		mode := fs.FileMode(0o755) // execd without a mode: 0777 &^ umask
		if meta.Mode != 0 {
			if mode, err = modeFromDigits(meta.Mode); err != nil {
				execdError(w, http.StatusBadRequest, "INVALID_FILE_METADATA", err.Error())
				return
			}
		}
		file, err := mr.NextPart()
		if err != nil || file.FormName() != "file" {
			execdError(w, http.StatusBadRequest, "INVALID_FILE", "file part is missing after metadata")
			return
		}
		if err := s.drv.WriteFile(r.Context(), b.id, meta.Path, file, mode); err != nil {
			fileError(w, err)
			return
		}
	}
}

func (s *Server) download(w http.ResponseWriter, r *http.Request, b *sbx) {
	p := r.URL.Query().Get("path")
	if p == "" {
		execdError(w, http.StatusBadRequest, "MISSING_QUERY", "missing query parameter path")
		return
	}
	rc, size, err := s.drv.OpenFile(r.Context(), b.id, p, -1)
	if err != nil {
		fileError(w, err)
		return
	}
	defer rc.Close()
	s.mu.Lock()
	cut := s.cutDown
	s.cutDown = 0
	s.mu.Unlock()
	if cut > 0 {
		defer func() { panic(http.ErrAbortHandler) }()
		w = &cutWriter{ResponseWriter: w, left: cut}
	}
	w.Header().Set("Accept-Ranges", "bytes")
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", path.Base(p)))
	rng := r.Header.Get("Range")
	if rng == "" {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		w.WriteHeader(http.StatusOK)
		io.CopyN(w, rc, size)
		return
	}
	from, to, ok := parseRange(rng, size)
	if !ok {
		w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", size))
		execdError(w, http.StatusRequestedRangeNotSatisfiable, "INVALID_REQUEST_BODY", "range not satisfiable: "+rng)
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
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	if err == nil && c.left <= 0 {
		err = errStreamClosed
	}
	return n, err
}

// parseRange reads "bytes=a-b" or "bytes=a-" (first range only).
func parseRange(h string, size int64) (from, to int64, ok bool) {
	spec, found := strings.CutPrefix(h, "bytes=")
	if !found {
		return 0, 0, false
	}
	spec, _, _ = strings.Cut(spec, ",")
	a, bs, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return 0, 0, false
	}
	from, err := strconv.ParseInt(a, 10, 64)
	if err != nil || from < 0 || from >= size {
		return 0, 0, false
	}
	to = size - 1
	if bs != "" {
		if to, err = strconv.ParseInt(bs, 10, 64); err != nil || to < from {
			return 0, 0, false
		}
		to = min(to, size-1)
	}
	return from, to, true
}

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
	if fi.Path != "" {
		p = fi.Path
	}
	return fileInfo{Path: p, Type: t, Size: fi.Size, ModifiedAt: fi.ModTime, CreatedAt: fi.ModTime, Owner: "root", Group: "root", Mode: modeDigits(fi.Mode)}
}

func (s *Server) info(w http.ResponseWriter, r *http.Request, b *sbx) {
	paths := r.URL.Query()["path"]
	if len(paths) == 0 {
		execdError(w, http.StatusBadRequest, "MISSING_QUERY", "missing query parameter path")
		return
	}
	out := map[string]fileInfo{}
	for _, p := range paths {
		fi, err := s.drv.Stat(r.Context(), b.id, p)
		if err != nil {
			fileError(w, err)
			return
		}
		out[p] = toInfo(fi, p)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) listDir(w http.ResponseWriter, r *http.Request, b *sbx) {
	p := r.URL.Query().Get("path")
	if p == "" {
		execdError(w, http.StatusBadRequest, "MISSING_QUERY", "missing query parameter path")
		return
	}
	if d := r.URL.Query().Get("depth"); d == "0" {
		writeJSON(w, http.StatusOK, []fileInfo{})
		return
	}
	entries, err := s.drv.List(r.Context(), b.id, p)
	if err != nil {
		fileError(w, err)
		return
	}
	out := make([]fileInfo, 0, len(entries))
	for _, e := range entries {
		out = append(out, toInfo(e, path.Join(p, e.Name)))
	}
	writeJSON(w, http.StatusOK, out)
}

// shell runs a helper command in the backing sandbox.
func (s *Server) shell(ctx context.Context, b *sbx, script string) error {
	var errOut bytes.Buffer
	res, err := s.drv.Exec(ctx, b.id, sandbox.ExecRequest{Command: script, Timeout: 30 * time.Second, Workdir: "/", Stdout: io.Discard, Stderr: &errOut})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 || res.TimedOut {
		return fmt.Errorf("%s", strings.TrimSpace(errOut.String()))
	}
	return nil
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request, b *sbx) {
	var body map[string]struct {
		Mode int `json:"mode"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body) == 0 {
		execdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "body must map paths to {mode}")
		return
	}
	for p, o := range body {
		mode := fs.FileMode(0o755)
		if o.Mode != 0 {
			var err error
			if mode, err = modeFromDigits(o.Mode); err != nil {
				execdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", err.Error())
				return
			}
		}
		script := fmt.Sprintf("[ -d %[1]s ] || mkdir -p -m %[2]o -- %[1]s", quote(p), mode)
		if err := s.shell(r.Context(), b, script); err != nil {
			execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", err.Error())
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) deleteFiles(w http.ResponseWriter, r *http.Request, b *sbx, dirs bool) {
	paths := r.URL.Query()["path"]
	if len(paths) == 0 {
		execdError(w, http.StatusBadRequest, "MISSING_QUERY", "missing query parameter path")
		return
	}
	for _, p := range paths {
		script := "rm -f -- " + quote(p)
		if dirs {
			script = "rm -rf -- " + quote(p)
		} else if fi, err := s.drv.Stat(r.Context(), b.id, p); err == nil && fi.IsDir() {
			execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", p+": path is a directory")
			return
		}
		if err := s.shell(r.Context(), b, script); err != nil {
			execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", err.Error())
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}
