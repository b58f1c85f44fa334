package fakeopensandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airflow-sandbox/airflow-go-worker/internal/poll"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// The lifecycle stand-in for a real execd (Options.ExecdBinary): each
// sandbox is still a backing sandbox of the local backend (its own files,
// environment and, when its policy blocks the network, its own network
// namespace), and the given execd binary runs inside it as the sandbox's
// only long-lived process, as in an OpenSandbox container. Requests to
// port 44772 are proxied to it unchanged: streams, early closes and error
// bodies are execd's own. The fake's execd, its versions and its fault
// hooks play no part.
//
// execd listens on every interface of its network namespace and has no
// flag to change that; a sandbox with an open network shares the test's
// namespace, so the stand-in refuses to start one unless that namespace
// has nothing but loopback (run the test under `unshare -n`).

// RealExecdEnv names the environment variable that points tests at a real
// execd binary; RealExecdBinary reads it.
const RealExecdEnv = "OPENSANDBOX_REAL_EXECD"

// RealExecdBinary is the execd binary named by OPENSANDBOX_REAL_EXECD, or
// "" when it is unset.
func RealExecdBinary() string { return os.Getenv(RealExecdEnv) }

// realExecdPath is where the binary sits inside each sandbox.
const realExecdPath = "/tmp/.opensandbox-execd"

// realExecdMarker is set in execd's environment so the stand-in can find
// its process (and through it, its network namespace).
const realExecdMarker = "OPENSANDBOX_STANDIN_SANDBOX"

// realExecd is one running execd and the proxy in front of it.
type realExecd struct {
	proxy *httputil.ReverseProxy
	stop  context.CancelFunc
	done  chan struct{}
}

// onlyLoopback reports whether this process's network namespace has no
// interface but loopback.
func onlyLoopback() (bool, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return false, err
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback == 0 {
			return false, nil
		}
	}
	return true, nil
}

// startRealExecd copies the binary into the backing sandbox id, runs it
// and waits until it answers /ping.
func (s *Server) startRealExecd(ctx context.Context, id string, blocked bool, env map[string]string) (*realExecd, error) {
	if !blocked {
		ok, err := onlyLoopback()
		if err != nil || !ok {
			return nil, fmt.Errorf("a real execd listens on every interface: run this test in a network namespace of its own with only loopback (unshare -n) (%v)", err)
		}
	}
	bin, err := os.Open(s.opts.ExecdBinary)
	if err != nil {
		return nil, fmt.Errorf("the real execd binary: %w", err)
	}
	err = s.drv.WriteFile(ctx, id, realExecdPath, bin, 0o755)
	bin.Close()
	if err != nil {
		return nil, fmt.Errorf("copying execd into the sandbox: %w", err)
	}
	port := ExecdPort
	if !blocked {
		if port, err = freePort(); err != nil {
			return nil, err
		}
	}
	runEnv := map[string]string{realExecdMarker: id}
	for k, v := range env {
		runEnv[k] = v
	}
	args := []string{realExecdPath, "--port", strconv.Itoa(port), "--log-level", "6"}
	if tok := s.opts.ExecdToken; tok != "" {
		if s.opts.ExecdTokenInEnv {
			runEnv["EXECD_ACCESS_TOKEN"] = tok
		} else {
			args = append(args, "--access-token", tok)
		}
	}
	x, out := s.launchRealExecd(id, args, runEnv)
	stop := x.stop
	fail := func(err error) (*realExecd, error) {
		stop()
		<-x.done
		return nil, fmt.Errorf("%w; execd said: %s", err, out.String())
	}
	var netns string
	if err := waitFor(ctx, x.done, func() bool { netns = findNetns(id); return netns != "" }); err != nil {
		return fail(fmt.Errorf("the real execd did not start: %w", err))
	}
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dialInNetns(ctx, netns, "127.0.0.1:"+strconv.Itoa(port))
	}
	// One connection per request: a command stream the client leaves after
	// its terminal event is cut here while execd lingers, and a connection
	// being torn down must never be handed to the next request.
	tr := &http.Transport{DialContext: dial, DisableCompression: true, DisableKeepAlives: true}
	ping := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	pinged := func() bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://execd/ping", nil)
		if tok := s.opts.ExecdToken; tok != "" {
			req.Header.Set(ExecdTokenHeader, tok)
		}
		resp, err := ping.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	if err := waitFor(ctx, x.done, pinged); err != nil {
		return fail(fmt.Errorf("the real execd did not answer /ping: %w", err))
	}
	x.proxy = s.realExecdProxy(id, port, tr, out)
	return x, nil
}

// launchRealExecd runs the execd binary in the backing sandbox id until
// its stop is called; out collects what it prints.
func (s *Server) launchRealExecd(id string, args []string, runEnv map[string]string) (*realExecd, *limitedWriter) {
	runCtx, stop := context.WithCancel(context.Background())
	x := &realExecd{stop: stop, done: make(chan struct{})}
	var logs strings.Builder
	out := &limitedWriter{b: &logs, left: 64 << 10}
	go func() {
		defer close(x.done)
		quoted := make([]string, len(args))
		for i, a := range args {
			quoted[i] = quote(a)
		}
		res, err := s.drv.Exec(runCtx, id, sandbox.ExecRequest{
			Command: "exec " + strings.Join(quoted, " "), Timeout: sandbox.MaxLifetime, Workdir: s.opts.Workdir,
			Env: runEnv, Stdout: out, Stderr: out,
		})
		if runCtx.Err() == nil {
			fmt.Fprintf(out, "\n[execd exited: code %d, timed out %v, error %v]\n", res.ExitCode, res.TimedOut, err)
			s.log.Warn("fake: the real execd stopped", "sandbox", id, "exit_code", res.ExitCode, "error", err)
		}
	}()
	return x, out
}

// realExecdProxy forwards requests to the real execd listening on port in
// the backing sandbox id, through tr.
func (s *Server) realExecdProxy(id string, port int, tr http.RoundTripper, out *limitedWriter) *httputil.ReverseProxy {
	target, _ := url.Parse("http://execd")
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.URL.Path = r.In.URL.Path
			r.Out.URL.RawPath = ""
			r.Out.Host = "127.0.0.1:" + strconv.Itoa(port)
		},
		Transport:     tr,
		FlushInterval: -1, // command streams go out as they come
		ModifyResponse: func(resp *http.Response) error {
			resp.Body = &loggedBody{ReadCloser: resp.Body, log: func(err error) {
				s.log.Warn("fake: the real execd's answer broke off", "sandbox", id, "path", resp.Request.URL.Path, "error", err, "execd_output", out.String())
			}}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.log.Warn("fake: proxying to the real execd failed", "sandbox", id, "path", r.URL.Path, "error", err, "execd_output", out.String())
			http.Error(w, "Bad Gateway", http.StatusBadGateway)
		},
	}
}

// serve proxies one request to the sandbox's execd, sub being the path
// below the endpoint. The request body is read whole first (spooled to
// spool): once the answer's headers are flushed the server may close the
// body, and the transport, which reads it to its end after sending it,
// would then drop the connection to execd mid-stream.
func (x *realExecd) serve(w http.ResponseWriter, r *http.Request, sub, spool string) {
	r2 := r.Clone(r.Context())
	r2.URL.Path = sub
	r2.URL.RawPath = ""
	if r.Body != nil && r.Body != http.NoBody {
		f, err := os.CreateTemp(spool, "proxied-")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer os.Remove(f.Name())
		defer f.Close()
		n, err := io.Copy(f, r.Body)
		if err == nil {
			_, err = f.Seek(0, io.SeekStart)
		}
		if err != nil {
			http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
			return
		}
		r2.Body, r2.ContentLength = io.NopCloser(f), n
		r2.Header.Del("Transfer-Encoding")
		r2.TransferEncoding = nil
	}
	x.proxy.ServeHTTP(&headerFlusher{w}, r2)
}

// headerFlusher sends the headers as soon as they are written: execd's
// answers that announce a body they never send (a directory download, a
// malformed Range) must reach the client as execd sends them, headers and
// then a closed connection, not as a connection closed with no answer.
type headerFlusher struct{ http.ResponseWriter }

func (h *headerFlusher) WriteHeader(code int) {
	h.ResponseWriter.WriteHeader(code)
	h.Flush()
}

func (h *headerFlusher) Flush() { h.ResponseWriter.(http.Flusher).Flush() }

func (h *headerFlusher) Unwrap() http.ResponseWriter { return h.ResponseWriter }

func (x *realExecd) close() {
	x.stop()
	<-x.done
}

// waitFor polls ok until it holds, ctx ends, or stopped closes.
func waitFor(ctx context.Context, stopped <-chan struct{}, ok func() bool) error {
	err := poll.Until(ctx, time.Minute, poll.Every(50*time.Millisecond), func() (bool, error) {
		if ok() {
			return true, nil
		}
		select {
		case <-stopped:
			return false, errors.New("it exited")
		default:
			return false, nil
		}
	})
	if errors.Is(err, poll.ErrTimeout) {
		return errors.New("timed out after a minute")
	}
	return err
}

// findNetns returns the network namespace of the process whose
// environment carries the sandbox's marker, or "".
func findNetns(id string) string {
	want := []byte(realExecdMarker + "=" + id + "\x00")
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		env, err := os.ReadFile(d + "/environ")
		if err != nil || !containsEntry(env, want) {
			continue
		}
		if exe, err := os.Readlink(d + "/exe"); err != nil || filepath.Base(exe) != filepath.Base(realExecdPath) {
			continue // the shell that is about to exec it
		}
		return d + "/ns/net"
	}
	return ""
}

func containsEntry(env, entry []byte) bool {
	for len(env) > 0 {
		if strings.HasPrefix(string(env), string(entry)) {
			return true
		}
		i := strings.IndexByte(string(env), 0)
		if i < 0 {
			return false
		}
		env = env[i+1:]
	}
	return false
}

// dialInNetns connects to addr from inside the network namespace at
// nsPath: the socket is made on an OS thread moved into it (a socket stays
// in the namespace it was made in), and the thread is moved back before it
// is released. It must not be left to exit instead: a child started from
// that thread with a parent-death signal (the local backend's bubblewrap)
// would be killed with it.
func dialInNetns(ctx context.Context, nsPath, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		home, err := unix.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("opening this thread's network namespace: %w", err)}
			return
		}
		defer unix.Close(home)
		fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("opening %s: %w", nsPath, err)}
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("entering %s: %w", nsPath, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if unix.Setns(home, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread() // only a thread back home may run other goroutines
		}
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// loggedBody reports a body that ends in an error, other than the client
// leaving first (as it may, after a command's terminal event).
type loggedBody struct {
	io.ReadCloser
	log    func(error)
	closed atomic.Bool
}

func (b *loggedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && !errors.Is(err, context.Canceled) && !b.closed.Load() {
		b.log(err)
	}
	return n, err
}

func (b *loggedBody) Close() error {
	b.closed.Store(true)
	return b.ReadCloser.Close()
}

// limitedWriter keeps the first left bytes written.
type limitedWriter struct {
	mu   sync.Mutex
	b    *strings.Builder
	left int
}

func (l *limitedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.left > 0 {
		n := min(len(p), l.left)
		l.b.Write(p[:n])
		l.left -= n
	}
	return len(p), nil
}
