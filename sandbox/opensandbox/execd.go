package opensandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// ExecdClient speaks execd's API at one endpoint. Unary calls use a client
// with the request timeout; command streams and downloads use one with no
// overall timeout (an http.Client timeout would cut a long command off) and
// are bounded by their context instead.
type ExecdClient struct {
	base    string
	headers map[string]string
	unary   *http.Client
	stream  *http.Client

	// What this execd offers, learnt from its answers (see files.go).
	untyped   atomic.Bool // GET /files/info has no type field (released v1.0.18)
	typed     atomic.Bool // it has one
	noListDir atomic.Bool // GET /directories/list is not a route
}

// NewExecdClient returns a client for baseURL (scheme included), sending
// headers on every request.
func NewExecdClient(baseURL string, headers map[string]string, unary, stream *http.Client) *ExecdClient {
	return &ExecdClient{base: strings.TrimSuffix(baseURL, "/"), headers: headers, unary: unary, stream: stream}
}

// Ping checks that execd answers.
func (c *ExecdClient) Ping(ctx context.Context) error {
	resp, err := c.send(ctx, c.unary, "reach execd", http.MethodGet, "/ping", nil, nil)
	if err != nil {
		return err
	}
	return expect(resp, "reach execd", http.StatusOK)
}

// CommandRequest is the body of POST /command.
type CommandRequest struct {
	Command   string            `json:"command"`
	Cwd       string            `json:"cwd,omitempty"`
	TimeoutMS int64             `json:"timeout,omitempty"`
	Envs      map[string]string `json:"envs,omitempty"`
}

// StartCommand posts a command and returns its event stream. The caller
// must close it.
func (c *ExecdClient) StartCommand(ctx context.Context, req CommandRequest) (io.ReadCloser, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hdr := http.Header{"Content-Type": {"application/json"}, "Accept": {"text/event-stream"}}
	resp, err := c.send(ctx, c.stream, "run command", http.MethodPost, "/command", nil, bytes.NewReader(b), hdr)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, readAPIError("run command", resp)
	}
	return resp.Body, nil
}

// Interrupt stops a running command: execd sends SIGTERM to its process
// group and answers once the group is gone, SIGKILLing it after about 3 s,
// so the call is bounded by ctx rather than the request timeout. A command
// that has already finished is not an error.
func (c *ExecdClient) Interrupt(ctx context.Context, id string) error {
	resp, err := c.send(ctx, c.stream, "interrupt command", http.MethodDelete, "/command", url.Values{"id": {id}}, nil)
	if err != nil {
		return err
	}
	err = expect(resp, "interrupt command "+id, http.StatusOK)
	if api, ok := err.(*APIError); ok && api.runtimeError() && strings.Contains(api.Message, "is not running") {
		return nil
	}
	return err
}

// FileInfo is execd's description of a path.
type FileInfo struct {
	Path       string    `json:"path"`
	Type       string    `json:"type"` // file | directory | symlink | other
	Size       int64     `json:"size"`
	ModifiedAt Timestamp `json:"modified_at"`
	Mode       int       `json:"mode"` // octal digits written as a decimal number: 644
}

// Perm decodes Mode's octal digits.
func (f FileInfo) Perm() fs.FileMode {
	p, err := strconv.ParseUint(strconv.Itoa(f.Mode), 8, 32)
	if err != nil {
		return 0
	}
	return fs.FileMode(p) & fs.ModePerm
}

// FileMode is the Go mode: permission bits plus the type bits.
func (f FileInfo) FileMode() fs.FileMode {
	m := f.Perm()
	switch f.Type {
	case "directory":
		m |= fs.ModeDir
	case "symlink":
		m |= fs.ModeSymlink
	case "file":
	default:
		m |= fs.ModeIrregular
	}
	return m
}

// modeDigits writes a mode the way execd wants it: octal digits as a number.
func modeDigits(m fs.FileMode) int {
	n, _ := strconv.Atoi(strconv.FormatUint(uint64(m.Perm()), 8))
	return n
}

// Info describes path. Builds with a type field (after v1.0.18) lstat it:
// a final symlink is not followed. Released v1.0.18 stats it, following
// a final symlink, and gives no type (FileInfo.Type ""); its answer for a
// missing path is a 500 (APIError.MissingFile). Either answer records
// which kind of build this is (Untyped).
func (c *ExecdClient) Info(ctx context.Context, path string) (FileInfo, error) {
	op := "stat " + path
	resp, err := c.send(ctx, c.unary, op, http.MethodGet, "/files/info", url.Values{"path": {path}}, nil)
	if err != nil {
		return FileInfo{}, err
	}
	var out map[string]FileInfo
	if err := decode(resp, op, &out); err != nil {
		var api *APIError
		if errors.As(err, &api) && api.MissingFile() {
			c.learnTyped(api.Status == http.StatusNotFound)
		}
		return FileInfo{}, err
	}
	for _, fi := range out {
		c.learnTyped(fi.Type != "") // every later build sends a type for every entry
		return fi, nil              // one path asked, one answer, keyed as the server likes
	}
	return FileInfo{}, fmt.Errorf("OpenSandbox could not %s: execd answered with no entry", op)
}

func (c *ExecdClient) learnTyped(typed bool) {
	if typed {
		c.typed.Store(true)
	} else {
		c.untyped.Store(true)
	}
}

// Untyped reports an execd whose GET /files/info was seen without a type
// field (released v1.0.18): it cannot tell files, directories and
// symlinks apart, and follows symlinks.
func (c *ExecdClient) Untyped() bool { return c.untyped.Load() && !c.typed.Load() }

// Move renames src to dest (POST /files/mv): atomically, replacing
// nothing: execd refuses a dest that exists (APIError.DestExists), though a
// dangling symlink there is replaced. dest's parent is created.
func (c *ExecdClient) Move(ctx context.Context, src, dest string) error {
	op := "move " + src + " to " + dest
	b, _ := json.Marshal([]map[string]string{{"src": src, "dest": dest}})
	resp, err := c.send(ctx, c.unary, op, http.MethodPost, "/files/mv", nil, bytes.NewReader(b), http.Header{"Content-Type": {"application/json"}})
	if err != nil {
		return err
	}
	return expect(resp, op, http.StatusOK)
}

// ListDir lists a directory's direct entries. Released v1.0.18 has no such
// route (an APIError with UnknownRoute, recorded: NoListDir).
func (c *ExecdClient) ListDir(ctx context.Context, path string) ([]FileInfo, error) {
	op := "list " + path
	resp, err := c.send(ctx, c.unary, op, http.MethodGet, "/directories/list", url.Values{"path": {path}, "depth": {"1"}}, nil)
	if err != nil {
		return nil, err
	}
	var out []FileInfo
	err = decode(resp, op, &out)
	var api *APIError
	if errors.As(err, &api) && api.UnknownRoute() {
		c.noListDir.Store(true)
	}
	return out, err
}

// NoListDir reports an execd seen without GET /directories/list.
func (c *ExecdClient) NoListDir() bool { return c.noListDir.Load() }

// Mkdir creates path and its parents; execd applies mode to path even
// when it existed.
func (c *ExecdClient) Mkdir(ctx context.Context, path string, mode fs.FileMode) error {
	op := "create directory " + path
	b, _ := json.Marshal(map[string]any{path: map[string]int{"mode": modeDigits(mode)}})
	resp, err := c.send(ctx, c.unary, op, http.MethodPost, "/directories", nil, bytes.NewReader(b), http.Header{"Content-Type": {"application/json"}})
	if err != nil {
		return err
	}
	return expect(resp, op, http.StatusOK)
}

// DeleteFile removes a file (a missing one is not an error). execd checks
// the type through symlinks: a symlink to a directory is refused and a
// dangling one is left in place; remove links with DeleteTree.
func (c *ExecdClient) DeleteFile(ctx context.Context, path string) error {
	op := "delete " + path
	resp, err := c.send(ctx, c.unary, op, http.MethodDelete, "/files", url.Values{"path": {path}}, nil)
	if err != nil {
		return err
	}
	return expect(resp, op, http.StatusOK)
}

// DeleteTree removes path recursively, as rm -rf: a symlink itself, never
// its target. A missing path is not an error.
func (c *ExecdClient) DeleteTree(ctx context.Context, path string) error {
	op := "delete " + path
	resp, err := c.send(ctx, c.unary, op, http.MethodDelete, "/directories", url.Values{"path": {path}}, nil)
	if err != nil {
		return err
	}
	return expect(resp, op, http.StatusOK)
}

// Upload streams r into path with mode, as one multipart pair (a metadata
// part, which execd only accepts with a filename, then the file part). The
// body is produced while it is sent, so memory stays bounded whatever the
// size; the request carries no overall timeout and is bounded by ctx.
func (c *ExecdClient) Upload(ctx context.Context, path string, r io.Reader, mode fs.FileMode) error {
	op := "upload " + path
	meta, err := json.Marshal(map[string]any{"path": path, "mode": modeDigits(mode)})
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		pw.CloseWithError(writeUploadBody(mw, meta, r))
	}()
	resp, err := c.send(ctx, c.stream, op, http.MethodPost, "/files/upload", nil, pr, http.Header{"Content-Type": {mw.FormDataContentType()}})
	pr.CloseWithError(io.ErrClosedPipe) // stops the writer if the request ended early
	if err != nil {
		return err
	}
	return expect(resp, op, http.StatusOK)
}

func writeUploadBody(mw *multipart.Writer, meta []byte, r io.Reader) error {
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="metadata"; filename="metadata"`)
	h.Set("Content-Type", "application/json")
	part, err := mw.CreatePart(h)
	if err != nil {
		return err
	}
	if _, err := part.Write(meta); err != nil {
		return err
	}
	h = textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="file"; filename="file"`)
	h.Set("Content-Type", "application/octet-stream")
	if part, err = mw.CreatePart(h); err != nil {
		return err
	}
	if _, err := io.Copy(part, r); err != nil {
		return fmt.Errorf("reading the data to upload: %w", err)
	}
	return mw.Close()
}

// Download streams path. With limit > 0 it asks for bytes 0..limit-1 only
// (a Range request, which execd answers with 200 and an empty body for an
// empty file). execd's answer for a directory, 200 with a Content-Length of
// 2^63-1 and no body, is an error matching sandbox.ErrIsDir, not a body to
// wait on. The caller must close the reader.
func (c *ExecdClient) Download(ctx context.Context, path string, limit int64) (io.ReadCloser, error) {
	op := "download " + path
	var hdr http.Header
	if limit > 0 {
		hdr = http.Header{"Range": {fmt.Sprintf("bytes=0-%d", limit-1)}}
	}
	resp, err := c.send(ctx, c.stream, op, http.MethodGet, "/files/download", url.Values{"path": {path}}, nil, hdr)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK, http.StatusPartialContent:
		if resp.ContentLength == math.MaxInt64 {
			resp.Body.Close()
			return nil, fmt.Errorf("OpenSandbox could not %s: %w (execd answered as for a directory: a 2^63-1 Content-Length and no body)", op, sandbox.ErrIsDir)
		}
		return resp.Body, nil
	case http.StatusRequestedRangeNotSatisfiable:
		// The body may never come (a malformed Range is answered with the
		// file's length as Content-Length and nothing): do not read it.
		resp.Body.Close()
		cr := resp.Header.Get("Content-Range")
		if cr == "bytes */0" {
			return io.NopCloser(strings.NewReader("")), nil // an empty file, as older builds answer
		}
		return nil, &APIError{Op: op, Status: resp.StatusCode, Message: fmt.Sprintf("execd refused the byte range (Content-Range %q)", cr)}
	}
	return nil, readAPIError(op, resp)
}

// send builds and sends one request with the endpoint headers.
func (c *ExecdClient) send(ctx context.Context, hc *http.Client, op, method, path string, q url.Values, body io.Reader, extra ...http.Header) (*http.Response, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("OpenSandbox could not %s: %v", op, err)
	}
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	for _, h := range extra {
		for k, vs := range h {
			req.Header[k] = vs
		}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, transportError(op, err)
	}
	return resp, nil
}

func expect(resp *http.Response, op string, want int) error {
	if resp.StatusCode != want {
		return readAPIError(op, resp)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	return nil
}

func decode(resp *http.Response, op string, out any) error {
	if resp.StatusCode != http.StatusOK {
		return readAPIError(op, resp)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(out); err != nil {
		return fmt.Errorf("OpenSandbox could not %s: execd's answer is not the expected JSON (%v)", op, err)
	}
	return nil
}
