package opensandbox

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// guardTransport is the one piece of HTTP handling the driver keeps below
// the SDK. The SDK's DownloadFile and RunCommand hand back only a body (or
// parse it themselves), so what execd's answers need that the SDK does not
// do is done here, on the responses, before the SDK sees them:
//
//   - an error body must arrive within errorBodyWait: execd answers some
//     errors with a Content-Length and no body, and on streams and
//     transfers (no request timeout) the SDK would wait for it forever;
//   - execd answers a download of a directory with 200, a Content-Length of
//     2^63-1 and no body: that is ErrIsDir, not a body to wait on (a proxy
//     in between may hold the connection open); on an overlay file system
//     (a container's) with 500 "seeker can't seek", ErrIsDir too;
//   - a command stream or a download that delivers nothing for the stall
//     timeout is broken (execd pings streams every 3 s);
//   - a command stream line is at most MaxEventBytes: the SDK reads a line
//     of any length into memory, and execd sends each output line as one.
type guardTransport struct {
	base  http.RoundTripper
	stall time.Duration
}

func (g *guardTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := g.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	path := req.URL.Path
	switch {
	case resp.StatusCode >= 400:
		resp.Body = newBodyDeadline(resp.Body, errorBodyWait)
		if isDownload(req) && seekFailed(resp) {
			return nil, errDirectoryDownload
		}
	case isDownload(req):
		if resp.StatusCode == http.StatusOK && resp.ContentLength == math.MaxInt64 {
			resp.Body.Close()
			return nil, errDirectoryDownload
		}
		resp.Body = newStallGuard(resp.Body, g.stall)
	case req.Method == http.MethodPost && strings.HasSuffix(path, "/command"):
		resp.Body = &lineBound{rc: newStallGuard(resp.Body, g.stall), max: MaxEventBytes}
	}
	return resp, nil
}

// CloseIdleConnections passes through, so Driver.Close reaches the pool.
func (g *guardTransport) CloseIdleConnections() {
	if c, ok := g.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

var errDirectoryDownload = fmt.Errorf("%w (execd answered as for a directory: a 2^63-1 Content-Length and no body, or 500 \"seeker can't seek\")", driver.ErrIsDir)

func isDownload(req *http.Request) bool {
	return req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/files/download")
}

// seekFailed reports execd's answer for a download of a directory on an
// overlay file system (a container's root: opensandbox-server on Docker):
// 500 "seeker can't seek", Go's http.ServeContent failing to size it. Any
// other error body is left for the SDK to read.
func seekFailed(resp *http.Response) bool {
	if resp.StatusCode != http.StatusInternalServerError || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		return false
	}
	head := make([]byte, 64)
	n, _ := io.ReadFull(resp.Body, head)
	if strings.TrimSpace(string(head[:n])) == "seeker can't seek" {
		resp.Body.Close()
		return true
	}
	resp.Body = readCloser{io.MultiReader(bytes.NewReader(head[:n]), resp.Body), resp.Body}
	return false
}

type readCloser struct {
	io.Reader
	io.Closer
}

// newBodyDeadline closes rc if it is not read to its end within d.
func newBodyDeadline(rc io.ReadCloser, d time.Duration) io.ReadCloser {
	t := time.AfterFunc(d, func() { rc.Close() })
	return &deadlineBody{rc: rc, t: t}
}

type deadlineBody struct {
	rc io.ReadCloser
	t  *time.Timer
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil {
		b.t.Stop()
	}
	return n, err
}

func (b *deadlineBody) Close() error {
	b.t.Stop()
	return b.rc.Close()
}

// MaxEventBytes bounds one line of a command stream. execd sends one event
// per output line, so this is also the longest output line a command can
// print before the stream is refused: memory stays bounded whatever the
// command does.
const MaxEventBytes = 16 << 20

// ErrEventTooLarge means one stream line exceeded MaxEventBytes.
var ErrEventTooLarge = fmt.Errorf("execd stream event is larger than %d bytes", MaxEventBytes)

// lineBound fails reading once a line grows past max bytes. The bytes of
// the read that passed the bound are still returned, so the cut line the
// SDK hands on is longer than max (decodeEvents tells it by that).
type lineBound struct {
	rc   io.ReadCloser
	max  int
	line int // bytes since the last newline
	err  error
}

func (l *lineBound) Read(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	n, err := l.rc.Read(p)
	chunk := p[:n]
	if i := bytes.IndexByte(chunk, '\n'); i >= 0 {
		if l.line+i > l.max+16 {
			l.err = ErrEventTooLarge
		}
		l.line = n - bytes.LastIndexByte(chunk, '\n') - 1
	} else {
		l.line += n
	}
	if l.line > l.max+16 { // room for an SSE "data: " prefix
		l.err = ErrEventTooLarge
	}
	if l.err != nil {
		return n, nil
	}
	return n, err
}

func (l *lineBound) Close() error { return l.rc.Close() }
