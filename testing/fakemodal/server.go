// Package fakemodal is a fake Modal control plane and task command router
// that both real Modal clients drive: the Go SDK (modal-client/go v0.11.1)
// and the Python client (modal 1.6.4, under the common.ai provider). Both
// gRPC services listen on one 127.0.0.1 port, and the router URL handed
// out is https:// as Modal's is: the Go SDK dials it in plaintext and the
// Python client with unverified TLS, because the control-plane URL is a
// localhost one, so the port tells the two apart by a connection's first
// byte (listener.go). Ids have Modal's V1 and V2 shapes (ids.go), which
// both clients route on. An RPC the fake does not serve is answered
// UNIMPLEMENTED, naming it, and fails the test (Options.AllowUnimplemented).
//
// Sandbox commands run as local processes through a driver.Driver (the
// local bubblewrap driver by default), so files and processes behave like a
// real sandbox's. Fault hooks let tests inject Unavailable errors, streams
// that drop, sandboxes that die mid-command and slow creates.
//
// Memory stays bounded however much a command prints: output a reader has
// received is dropped (bar a 1 MiB tail for resumed streams), and a command
// blocks once 8 MiB of its output wait unread. A client that waits for the
// exit code before reading more than 8 MiB of output would therefore stall;
// the SDK's own ReadFile (wait, then read) is served differently and does
// not. File calls (fs-tools) reach what the exec driver's file API reaches
// (for the local driver: paths inside the sandbox, see its docs).
package fakemodal

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/local"
)

// Default credentials the fake accepts when Options leaves them empty.
const (
	DefaultTokenID     = "ak-fakemodal"
	DefaultTokenSecret = "as-fakemodal-secret"
)

// Options configure a fake server.
type Options struct {
	TokenID, TokenSecret string // accepted credentials; defaults above
	// Exec runs the sandboxes' commands and holds their files. Nil: the
	// local bubblewrap driver (sandbox/local) rooted at Root.
	Exec driver.Driver
	// Addr is the host:port to listen on ("" = 127.0.0.1 and a free
	// port). Clients dial the router in plaintext or with unverified TLS
	// only when the control plane is on localhost, so nothing else is
	// accepted: 127.0.0.1, or 172.21.0.1, which Modal's Go client counts as
	// local too (LocalAddr; the airflow-e2e Celery mode serves workers in
	// other network namespaces from it).
	Addr string
	// Root is where the default exec driver keeps sandboxes ("" = a temp dir).
	Root   string
	Logger hclog.Logger
	// AllowUnimplemented stops Start from failing the test when a client
	// called an RPC the fake does not serve (it still answers UNIMPLEMENTED,
	// naming the method). Only for tests of that answer itself.
	AllowUnimplemented bool
}

// The process and disk limits of the fake's sandboxes.
const (
	fakeMaxProcesses = 256
	fakeDiskMiB      = 512
)

// LocalAddr is the one address besides loopback that Modal's Go client
// treats as local (modal-client/go config.go, isLocalhost), dialing its
// command router in plaintext.
const LocalAddr = "172.21.0.1"

// Server is a running fake. All methods are safe for concurrent use.
type Server struct {
	opts    Options
	exec    driver.Driver
	ownExec bool
	tmpRoot string // removed on Close when New made it
	log     hclog.Logger
	lis     net.Listener
	grpc    *grpc.Server
	addr    string

	authJWT   string
	routerJWT string

	mu              sync.Mutex
	apps            map[string]string       // env + "/" + name -> app id
	sandboxes       map[string]*fakeSandbox // by sandbox id
	byTask          map[string]*fakeSandbox
	creates         []CreateRecord
	execs           []ExecRecord
	idempotent      map[string]*fakeSandbox // x-idempotency-key -> the sandbox it created
	calls           map[string]int
	faults          map[string][]error // method -> errors for the next calls
	createDelay     time.Duration
	hold            chan struct{}           // non-nil: creates wait until it closes (HoldCreates)
	held            map[string]CreateRecord // creates waiting on hold, by sandbox id
	failAfterCreate int
	dropAfter       int64 // stdio streams drop after this many bytes
	dropCount       int   // ... this many more times
	closed          bool
	// FailCommands' pick, the exit code it gives, the commands it ended
	failCommand    func(tags map[string]string, args []string) bool
	failCode       int32
	failedCommands []ExecRecord
	// work counts the goroutines using the exec driver for a client (a
	// create, a command, a file tool). Added to under mu while !closed only,
	// so Close can wait for them before it closes the driver under them.
	work          sync.WaitGroup
	lastCreated   time.Time
	secrets       map[string]map[string]string
	unimplemented map[string]bool // full method names a client called that the fake does not serve
}

// CreateRecord is what a sandbox-create call carried, for assertions.
type CreateRecord struct {
	SandboxID  string
	V2         bool
	AppID      string
	Definition *pb.Sandbox
	Tags       map[string]string
	Env        map[string]string // env from inline secret sources
}

// ExecRecord is one command a client started in a sandbox (TaskExecStart),
// for assertions on what ran where. Args are as the client sent them: the
// Python client's run_command sends ["sh", "-c", CMD], its filesystem API
// the fs-tools helper (fsToolsPath) and a JSON request.
type ExecRecord struct {
	SandboxID string
	Args      []string
}

// SandboxInfo describes a live fake sandbox.
type SandboxInfo struct {
	ID, Name, AppID, TaskID string
	Tags                    map[string]string
	CreatedAt               time.Time
	Timeout                 time.Duration
}

// Start starts a fake for a test and stops it in t.Cleanup.
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	if opts.Root == "" && opts.Exec == nil {
		opts.Root = tb.TempDir()
	}
	s, err := New(opts)
	if err != nil {
		tb.Fatalf("fakemodal: %v", err)
	}
	tb.Cleanup(func() {
		s.Close()
		if m := s.Unimplemented(); len(m) > 0 && !opts.AllowUnimplemented {
			tb.Errorf("fakemodal: a client called RPCs the fake does not serve (it answered UNIMPLEMENTED): %s; serve them in testing/fakemodal", strings.Join(m, ", "))
		}
	})
	return s
}

// New starts a fake outside tests. Close stops it.
func New(opts Options) (*Server, error) {
	if opts.TokenID == "" {
		opts.TokenID = DefaultTokenID
	}
	if opts.TokenSecret == "" {
		opts.TokenSecret = DefaultTokenSecret
	}
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	s := &Server{
		opts: opts, log: log, exec: opts.Exec,
		apps:      map[string]string{},
		sandboxes: map[string]*fakeSandbox{}, byTask: map[string]*fakeSandbox{},
		calls: map[string]int{}, faults: map[string][]error{}, idempotent: map[string]*fakeSandbox{}, held: map[string]CreateRecord{},
		unimplemented: map[string]bool{},
	}
	if s.exec == nil {
		root := opts.Root
		if root == "" {
			var err error
			if root, err = os.MkdirTemp("", "fakemodal-"); err != nil {
				return nil, err
			}
			s.tmpRoot = root
		}
		// The fake never pulls images: commands run on the host's userland
		// inside the local driver's bubblewrap sandboxes. They are smaller
		// than the local backend's own, so that the many a test of the
		// fake makes fit in the test host's budgets (sandbox/local's
		// budget.go).
		drv, err := local.New(local.Options{Root: root, IgnoreImage: true, Logger: log.Named("exec"),
			MaxProcesses: fakeMaxProcesses, DiskMiB: fakeDiskMiB})
		if err != nil {
			return nil, fmt.Errorf("fakemodal runs sandbox commands with the local driver: %w", err)
		}
		s.exec, s.ownExec = drv, true
	}
	exp := time.Now().Add(24 * time.Hour).Unix()
	s.authJWT = makeJWT(map[string]any{"sub": "fake-auth", "exp": exp})
	s.routerJWT = makeJWT(map[string]any{"sub": "fake-router", "exp": exp})

	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if host, _, err := net.SplitHostPort(addr); err != nil || (host != "127.0.0.1" && host != LocalAddr) {
		return nil, fmt.Errorf("fakemodal: listen address %q must be 127.0.0.1:PORT or %s:PORT: the Modal clients trust a plaintext or unverified router only on localhost", addr, LocalAddr)
	}
	inner, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	lis, err := newSniffListener(inner)
	if err != nil {
		inner.Close()
		return nil, fmt.Errorf("fakemodal: router TLS certificate: %w", err)
	}
	s.lis, s.addr = lis, inner.Addr().String()
	s.grpc = grpc.NewServer(
		// The SDK pings idle connections every 30 s; grpc's default policy
		// answers that with GOAWAY too_many_pings.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.MaxRecvMsgSize(100<<20),
		grpc.ChainUnaryInterceptor(s.unaryInterceptor),
		grpc.ChainStreamInterceptor(s.streamInterceptor),
		grpc.UnknownServiceHandler(s.unknownMethod),
	)
	pb.RegisterModalClientServer(s.grpc, &control{s: s})
	pb.RegisterTaskCommandRouterServer(s.grpc, &router{s: s})
	go s.grpc.Serve(lis) //nolint:errcheck // returns when stopped
	return s, nil
}

// Addr is host:port of the fake.
func (s *Server) Addr() string { return s.addr }

// URL is the control-plane URL (MODAL_SERVER_URL).
func (s *Server) URL() string { return "http://" + s.addr }

// TokenID and TokenSecret are the credentials the fake accepts.
func (s *Server) TokenID() string     { return s.opts.TokenID }
func (s *Server) TokenSecret() string { return s.opts.TokenSecret }

// Env returns the environment a client needs to reach the fake. The
// config-file path points nowhere so a developer's ~/.modal.toml is ignored.
func (s *Server) Env() map[string]string {
	return map[string]string{
		"MODAL_SERVER_URL":   s.URL(),
		"MODAL_TOKEN_ID":     s.opts.TokenID,
		"MODAL_TOKEN_SECRET": s.opts.TokenSecret,
		"MODAL_CONFIG_PATH":  "/nonexistent/modal.toml",
	}
}

// SetEnv sets Env() on tb (t.Setenv; not for parallel tests).
func (s *Server) SetEnv(tb testing.TB) {
	for k, v := range s.Env() {
		tb.Setenv(k, v)
	}
}

// Close stops the server and destroys every sandbox it still runs. When it
// returns, nothing of the fake uses the exec driver any more.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.grpc.Stop()
	s.mu.Lock()
	var live []*fakeSandbox
	for _, sb := range s.sandboxes {
		live = append(live, sb)
	}
	s.mu.Unlock()
	for _, sb := range live {
		s.finish(sb, pb.GenericResult_GENERIC_STATUS_TERMINATED, 0)
		<-sb.destroyed // a finish already under way elsewhere completes too
	}
	// Commands killed above may still be returning from the exec driver
	// (grpc's Stop does not wait for handlers either).
	s.work.Wait()
	if s.ownExec {
		s.exec.Close()
	}
	if s.tmpRoot != "" {
		os.RemoveAll(s.tmpRoot)
	}
}

// Unimplemented lists the RPCs (full method names) clients called that the
// fake does not serve.
func (s *Server) Unimplemented() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.unimplemented))
	for m := range s.unimplemented {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// Sandboxes lists the sandboxes that are still running (for leak checks).
func (s *Server) Sandboxes() []SandboxInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []SandboxInfo
	for _, sb := range s.sandboxes {
		if sb.isDone() {
			continue
		}
		out = append(out, sb.info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Creates returns every create call received, oldest first.
func (s *Server) Creates() []CreateRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]CreateRecord(nil), s.creates...)
}

// Execs returns every command started in a sandbox, oldest first.
func (s *Server) Execs() []ExecRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ExecRecord(nil), s.execs...)
}

// Calls is how many times the RPC method (e.g. "SandboxCreateV2") was called.
func (s *Server) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

// FailNext makes the next n calls of method fail with code.
func (s *Server) FailNext(method string, n int, code codes.Code) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 0; i < n; i++ {
		s.faults[method] = append(s.faults[method], status.Errorf(code, "fakemodal: injected %s failure of %s", code, method))
	}
}

// SetCreateDelay makes every create wait d after the sandbox exists and
// before answering, as a slow control plane does.
func (s *Server) SetCreateDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.createDelay = d
}

// HoldCreates makes every create from now on wait, once its sandbox
// exists, until release is called (or its caller gives up): the sandbox is
// live but the client does not know its id yet, a window a test can act in
// (kill the caller, stop a service) without racing it. HeldCreates lists
// the waiting ones. release is safe to call more than once.
func (s *Server) HoldCreates() (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hold := make(chan struct{})
	s.hold = hold
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.hold == hold {
				s.hold = nil
			}
			s.mu.Unlock()
			close(hold)
		})
	}
}

// HeldCreates lists the creates waiting for HoldCreates' release.
func (s *Server) HeldCreates() []CreateRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]CreateRecord, 0, len(s.held))
	for _, c := range s.held {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SandboxID < out[j].SandboxID })
	return out
}

// FailAfterCreate makes the next n create calls provision the sandbox (a
// retry with the same idempotency key reuses it) and then answer
// Unavailable, so the client cannot tell whether it exists.
func (s *Server) FailAfterCreate(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failAfterCreate = n
}

// DropStdioStreams makes the next count stdio read streams fail with
// Unavailable after sending afterBytes bytes (clients resume by offset).
func (s *Server) DropStdioStreams(afterBytes int64, count int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropAfter, s.dropCount = afterBytes, count
}

// FailCommands makes each command started from now on for which
// fail(its sandbox's tags, its argv) is true exit with code at once,
// without running, saying so on its stderr: a fault scoped to one run's
// sandboxes (their owner tag) and one command, the rest of the fake
// unchanged. nil stops it. FailedCommands lists the commands it ended.
func (s *Server) FailCommands(code int32, fail func(tags map[string]string, args []string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failCommand, s.failCode = fail, code
}

// FailedCommands lists the commands FailCommands ended.
func (s *Server) FailedCommands() []ExecRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ExecRecord(nil), s.failedCommands...)
}

// KillSandbox makes a sandbox die now, as if its host failed: running
// commands are killed and it reports TERMINATED.
func (s *Server) KillSandbox(id string) error {
	s.mu.Lock()
	sb := s.sandboxes[id]
	s.mu.Unlock()
	if sb == nil {
		return fmt.Errorf("fakemodal: no sandbox %s", id)
	}
	s.finish(sb, pb.GenericResult_GENERIC_STATUS_TERMINATED, 0)
	return nil
}

// ExpireSandbox makes a sandbox reach the end of its lifetime now, as its
// timer would: running commands are killed and it reports TIMEOUT.
func (s *Server) ExpireSandbox(id string) error {
	s.mu.Lock()
	sb := s.sandboxes[id]
	s.mu.Unlock()
	if sb == nil {
		return fmt.Errorf("fakemodal: no sandbox %s", id)
	}
	s.finish(sb, pb.GenericResult_GENERIC_STATUS_TIMEOUT, 0)
	return nil
}

func makeJWT(claims map[string]any) string {
	enc := base64.RawURLEncoding
	head, _ := json.Marshal(map[string]string{"alg": "none", "typ": "JWT"})
	body, _ := json.Marshal(claims)
	return enc.EncodeToString(head) + "." + enc.EncodeToString(body) + "." + enc.EncodeToString([]byte("fakesig"))
}

// errShuttingDown answers calls that reach a fake being closed.
var errShuttingDown = status.Error(codes.Unavailable, "fakemodal: the server is shutting down")

const (
	controlService = "/modal.client.ModalClient/"
	routerService  = "/modal.task_command_router.TaskCommandRouter/"
)

// admit counts the call, checks credentials and applies injected faults.
func (s *Server) admit(ctx context.Context, full string) error {
	method := path.Base(full)
	s.log.Debug("rpc", "method", full)
	s.mu.Lock()
	s.calls[method]++
	var fault error
	if q := s.faults[method]; len(q) > 0 {
		fault, s.faults[method] = q[0], q[1:]
	}
	s.mu.Unlock()
	if err := s.authorize(ctx, full); err != nil {
		return err
	}
	return fault
}

func (s *Server) authorize(ctx context.Context, full string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	get := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	switch {
	case strings.HasPrefix(full, routerService):
		if get("authorization") != "Bearer "+s.routerJWT {
			return status.Error(codes.Unauthenticated, "fakemodal: missing or wrong router bearer token")
		}
	case strings.HasPrefix(full, controlService):
		if get("x-modal-token-id") != s.opts.TokenID || get("x-modal-token-secret") != s.opts.TokenSecret {
			return status.Error(codes.Unauthenticated, "fakemodal: token id/secret rejected")
		}
		tok, sent := md["x-modal-auth-token"]
		if (sent || needsAuthToken(path.Base(full))) && (len(tok) != 1 || tok[0] != s.authJWT) {
			return status.Error(codes.Unauthenticated, "fakemodal: missing or wrong x-modal-auth-token")
		}
	}
	return nil
}

// needsAuthToken: the RPCs both clients send x-modal-auth-token (the JWT
// from AuthTokenGet) with. modal-go sends it on every call but AuthTokenGet;
// the Python client only on the V2 sandbox RPCs and
// SandboxGetCommandRouterAccess (modal 1.6.4 sandbox/_impl_v2.py), not on
// the classic ones (AppGetOrCreate, SandboxWait, ...).
func needsAuthToken(method string) bool {
	return strings.HasSuffix(method, "V2") || method == "SandboxGetCommandRouterAccess"
}

func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := s.admit(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	resp, err := handler(ctx, req)
	return resp, s.noteUnimplemented(info.FullMethod, err)
}

func (s *Server) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := s.admit(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return s.noteUnimplemented(info.FullMethod, handler(srv, ss))
}

// noteUnimplemented records a call the generated Unimplemented*Server
// answered, and says in the answer which fake it reached.
func (s *Server) noteUnimplemented(full string, err error) error {
	if status.Code(err) != codes.Unimplemented {
		return err
	}
	s.mu.Lock()
	s.unimplemented[full] = true
	s.mu.Unlock()
	return status.Errorf(codes.Unimplemented, "fakemodal does not serve %s (it is not needed by the flows the fake models; add it to testing/fakemodal)", full)
}

// unknownMethod answers RPCs of services or methods the generated code does
// not know at all (a client newer than the fake's protos).
func (s *Server) unknownMethod(_ any, ss grpc.ServerStream) error {
	full, _ := grpc.MethodFromServerStream(ss)
	return s.noteUnimplemented(full, status.Error(codes.Unimplemented, "unknown method"))
}
