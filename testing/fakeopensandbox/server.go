// Package fakeopensandbox is an in-process OpenSandbox for tests: one HTTP
// server on 127.0.0.1 that speaks the lifecycle API (/v1/...), an
// execd-compatible API and the egress sidecar's GET /policy, backed by real
// sandboxes of a driver.Driver (the local bubblewrap backend by default).
//
// Its lifecycle API follows docs/opensandbox-execd.md: 202 on
// create, Pending before Running, 404 after delete or expiry, endpoints
// without a scheme, {code,message} errors, 422 {detail} for malformed
// bodies. Its execd answers as execd built from OpenSandbox's source does,
// in the version Options.Version names (VersionV1018, the released one, or
// VersionMain), checked against recordings of the real thing through the
// official Python SDK (sdk_test.go). See execd.go, files.go and fileops.go
// for the execd details. With Options.ExecdBinary it runs a real execd in
// each sandbox instead (realexecd.go).
//
// Execd is reachable two ways, as on a real server on Docker
// (endpoints.go): through the server proxy route
// [/v1]/sandboxes/{id}/proxy/{port}/... (use_server_proxy=true; no API
// key) and through the sandbox's own endpoint, a port of its own on
// 127.0.0.1 serving /proxy/{port}/..., where nothing listens once the
// sandbox is gone. The egress sidecar's endpoint comes with its token
// header, so tests see whether a client forwards endpoint headers.
//
// Where the real server's answers matter to a client, the fake gives them
// (options Images, MaxTimeout, CreateLatency, ExpiredFor, OverlayFS): an
// image the server has not got, its lifetime cap, a create answered only
// once the sandbox is up, Failed before 404 at expiry, a directory
// download on a container's file system.
//
// The network policy is enforced, not just stored: a sandbox created with
// a policy that denies by default runs every command in its own network
// namespace (loopback only: bubblewrap's --unshare-net), and one without a
// policy, as on a real server without an egress sidecar, shares the host's
// network. A deny-by-default policy's allow rules are reported back but
// reach nothing (there is no internet here); a policy that allows by
// default but denies some targets cannot be enforced and is refused with a
// 400. Options.UnenforcedNetworkPolicy turns enforcement off while still
// reporting the policy as enforced, so tests can prove their network
// probes would notice.
package fakeopensandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/local"
)

// Header names the fake uses.
const (
	APIKeyHeader     = "OPEN-SANDBOX-API-KEY"
	EgressAuthHeader = "OPENSANDBOX-EGRESS-AUTH"
	ExecdTokenHeader = "X-EXECD-ACCESS-TOKEN"
	ExecdPort        = 44772
	EgressPort       = 18080
)

// The execd builds the fake imitates (Options.Version), each verified
// against execd built from OpenSandbox's source at that point
// (testdata/sdk-*.json, docs/opensandbox-execd.md):
//
//   - VersionV1018: the released v1.0.18, tag docker/execd/v1.0.18
//     (commit 27726236), from which the v1.0.18 image is published.
//     GET /files/info gives no type and follows symlinks, a missing path
//     is a 500 RUNTIME_ERROR, and there is no GET /directories/list.
//   - VersionMain: the newest source available, the main branch at
//     4db3a993: types, lstat, 404 FILE_NOT_FOUND, /directories/list, and
//     POST /files/replace?verbose=true.
const (
	VersionV1018 = "v1.0.18"
	VersionMain  = "main-4db3a993"
)

// Versions lists the execd builds the fake imitates, oldest first.
var Versions = []string{VersionV1018, VersionMain}

// Routes that fault hooks can target.
const (
	RouteCreate      = "create"
	RouteGet         = "get"
	RouteList        = "list"
	RoutePatch       = "patch"
	RouteDelete      = "delete"
	RouteRenew       = "renew"
	RouteEndpoint    = "endpoint"
	RoutePing        = "ping"
	RouteCommand     = "command"
	RouteInterrupt   = "interrupt"
	RouteUpload      = "upload"
	RouteDownload    = "download"
	RouteInfo        = "info"
	RouteListDir     = "listdir"
	RouteMkdir       = "mkdir"
	RouteDeleteFiles = "deletefiles"
	RouteDeleteDirs  = "deletedirs"
	RoutePolicy      = "policy"
	RouteStatus      = "status"
	RouteLogs        = "logs"
	RouteSearch      = "search"
	RouteMove        = "move"
	RoutePermissions = "permissions"
	RouteReplace     = "replace"
	RouteMetrics     = "metrics"
)

// Options configure the fake.
type Options struct {
	// APIKey the lifecycle API demands; default a random key. NoAuth turns
	// the check off, as a server without server.api_key.
	APIKey string
	NoAuth bool
	// Version is the execd build to imitate: VersionV1018 (the default,
	// the released one) or VersionMain.
	Version string
	// Driver backs the sandboxes; default sandbox/local in a temporary
	// directory (closed with the server). It must enforce Network.Block.
	Driver driver.Driver
	// Workdir of the backing sandboxes; default /workspace. With the local
	// backend only it and /tmp are writable; relative execd paths resolve
	// against it.
	Workdir string
	// PendingFor keeps new sandboxes Pending this long (slow create).
	PendingFor time.Duration
	// IgnoreNetworkPolicy simulates a server without an egress sidecar:
	// policies are accepted, not enforced, and reported back as allow-all.
	IgnoreNetworkPolicy bool
	// UnenforcedNetworkPolicy simulates an egress sidecar that reports the
	// policy it was given but does not enforce it (it lacks CAP_NET_ADMIN):
	// the sandbox keeps the host's network. Only for proving that network
	// tests can fail; no client can detect it.
	UnenforcedNetworkPolicy bool
	// EgressMode is the enforcementMode reported by GET /policy; default "dns+nft".
	EgressMode string
	// ExecdToken, when set, is the access token execd demands in
	// X-EXECD-ACCESS-TOKEN on every route (/ping included); the endpoint
	// lookup of port 44772 hands it out in its headers, as a gateway that
	// injects it would.
	ExecdToken string
	// ExecdTokenInEnv: execd got its token from EXECD_ACCESS_TOKEN, so, as
	// on real execd, every command inherits it in its environment.
	ExecdTokenInEnv bool
	// Linger is how long execd keeps a command stream open after its
	// terminal event; default 1 s (execd's --graceful-shutdown-timeout).
	Linger time.Duration
	// Lifetime, when set, replaces every requested timeout (which the API
	// requires to be at least 60 s), so tests can watch sandboxes expire.
	Lifetime time.Duration
	// ExecdBinary, when set, is a real execd binary (built from
	// OpenSandbox's source) that runs inside every sandbox in place of the
	// fake's own execd; the fake is then the lifecycle stand-in in front
	// of it (see realexecd.go). Version and the execd fault hooks do not
	// apply.
	ExecdBinary string
	// Images are the images the server's Docker host has; a create naming
	// another answers as opensandbox-server does for an image it cannot
	// pull: 500 DOCKER::SANDBOX_IMAGE_PULL_FAILED. Nil: every image.
	Images []string
	// MaxTimeout is the server's max_sandbox_timeout_seconds: a create
	// asking for a longer timeout is 400 SANDBOX::INVALID_PARAMETER. Zero:
	// no cap (the server's default).
	MaxTimeout time.Duration
	// CreateLatency holds each create's answer this long: the real server
	// answers 202 only once the sandbox's containers are up (1.3-5.7 s
	// measured on Docker).
	CreateLatency time.Duration
	// ExpiredFor is how long an expired sandbox's record says Failed
	// (CONTAINER_EXITED_ERROR) before it is gone, as on the real server
	// (about a second); default 1 s, negative: gone at once.
	ExpiredFor time.Duration
	// OverlayFS: execd's files live on a container's overlay file system
	// (the real server on Docker), where a directory download answers 500
	// "seeker can't seek" instead of 200 with a 2^63-1 Content-Length.
	OverlayFS bool
	Logger    hclog.Logger
}

// defaultLinger is execd's --graceful-shutdown-timeout.
const defaultLinger = time.Second

// Server is a running fake.
type Server struct {
	URL    string // http://127.0.0.1:port
	Domain string // 127.0.0.1:port, what a connection's host:port holds
	APIKey string

	opts    Options
	drv     driver.Driver
	log     hclog.Logger
	hs      *httptest.Server
	closing chan struct{}
	spool   string // host directory for upload bodies

	mu        sync.Mutex
	sandboxes map[string]*sbx
	faults    map[string][]Fault // route -> what the next calls do
	calls     map[string]int     // route -> calls received
	stream    streamFault        // for the next command stream
	downFault downloadFault      // for the next download
	cutUp     int64              // >0: the next upload is cut after this many bytes
	vanish    bool               // the next command's sandbox vanishes after its first output
	loseAns   bool               // the next create succeeds but its answer is lost
	creates   []json.RawMessage
	ignorePol bool
	pending   time.Duration
	// writableAll: every path is writable (NewExecd's container), not only
	// the workdir and /tmp of a local backing sandbox.
	writableAll bool
}

// sbx is one sandbox.
type sbx struct {
	id          string
	image       string
	entrypoint  []string
	metadata    map[string]string
	policy      *NetworkPolicy
	createdAt   time.Time
	readyAt     time.Time
	expiresAt   time.Time // zero: no expiry
	timer       *time.Timer
	forced      *status // a state forced by SetState
	egressToken string
	direct      *http.Server // its own endpoint (endpoints.go)
	directAddr  string
	stopOnce    sync.Once
	gone        chan struct{}
	cmds        map[string]*command
	real        *realExecd // with Options.ExecdBinary, once it answers
	starting    bool       // its real execd is starting
}

// NetworkPolicy is the create-time policy as the fake stored it.
type NetworkPolicy struct {
	DefaultAction string `json:"defaultAction,omitempty"`
	Egress        []Rule `json:"egress"`
}

// Rule is one egress rule.
type Rule struct {
	Action string `json:"action"`
	Target string `json:"target"`
}

// Sandbox is a snapshot of one live sandbox, for assertions.
type Sandbox struct {
	ID            string
	State         string
	Image         string
	Metadata      map[string]string
	NetworkPolicy *NetworkPolicy
	ExpiresAt     time.Time
}

// Start runs a fake until the test ends.
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	s := &Server{
		opts: opts, closing: make(chan struct{}),
		sandboxes: map[string]*sbx{}, faults: map[string][]Fault{}, calls: map[string]int{},
		ignorePol: opts.IgnoreNetworkPolicy, pending: opts.PendingFor, spool: tb.TempDir(),
	}
	switch s.opts.Version {
	case "":
		s.opts.Version = VersionV1018
	case VersionV1018, VersionMain:
	default:
		tb.Fatalf("fakeopensandbox: unknown execd version %q; use one of %v", s.opts.Version, Versions)
	}
	if s.opts.Linger == 0 {
		s.opts.Linger = defaultLinger
	}
	if s.opts.ExpiredFor == 0 {
		s.opts.ExpiredFor = time.Second
	}
	s.log = opts.Logger
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	}
	if s.opts.Workdir == "" {
		s.opts.Workdir = sandbox.DefaultWorkdir
	}
	if s.opts.EgressMode == "" {
		s.opts.EgressMode = "dns+nft"
	}
	s.APIKey = opts.APIKey
	if s.APIKey == "" && !opts.NoAuth {
		s.APIKey = "fake-key-" + randHex(12)
	}
	s.drv = opts.Driver
	if s.drv == nil {
		// Open networks are the worker's own, as the fake's doc promises.
		drv, err := local.New(local.Options{Root: tb.TempDir(), Logger: s.log, ShareWorkerNetwork: true})
		if err != nil {
			tb.Fatalf("fakeopensandbox: cannot start the local backend: %v", err)
		}
		s.drv = drv
		tb.Cleanup(func() { drv.Close() })
	}
	// URL and Domain are set before it serves: handlers read Domain, and a
	// request's arrival orders nothing before it (the race detector says so).
	s.hs = httptest.NewUnstartedServer(s.routes())
	s.Domain = s.hs.Listener.Addr().String()
	s.URL = "http://" + s.Domain
	s.hs.Start()
	tb.Cleanup(s.close)
	return s
}

func (s *Server) close() {
	close(s.closing)
	s.mu.Lock()
	ids := make([]string, 0, len(s.sandboxes))
	for id := range s.sandboxes {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.remove(id)
	}
	s.hs.Close()
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Version is the execd build the fake imitates.
func (s *Server) Version() string { return s.opts.Version }

// Sandboxes lists the live sandboxes, oldest first.
func (s *Server) Sandboxes() []Sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Sandbox
	for _, b := range s.sorted() {
		out = append(out, s.snapshot(b))
	}
	return out
}

func (s *Server) snapshot(b *sbx) Sandbox {
	meta := make(map[string]string, len(b.metadata))
	for k, v := range b.metadata {
		meta[k] = v
	}
	return Sandbox{ID: b.id, State: s.state(b), Image: b.image, Metadata: meta, NetworkPolicy: b.policy, ExpiresAt: b.expiresAt}
}

// RunningCommands counts commands still running in all live sandboxes.
func (s *Server) RunningCommands() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, b := range s.sandboxes {
		for _, c := range b.cmds {
			select {
			case <-c.done:
			default:
				n++
			}
		}
	}
	return n
}

// CreateRequests returns the bodies of every create request received.
func (s *Server) CreateRequests() []json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]json.RawMessage(nil), s.creates...)
}

// SetState forces a sandbox's reported state (e.g. "Failed" with a reason),
// as the runtime would after a crash; it reports whether the sandbox exists.
func (s *Server) SetState(id, state, reason string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.sandboxes[id]
	if ok {
		b.forced = &status{State: state, Reason: reason, Message: "forced by the test"}
	}
	return ok
}

type status struct {
	State   string `json:"state"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// SetPendingFor changes how long new sandboxes stay Pending.
func (s *Server) SetPendingFor(d time.Duration) {
	s.mu.Lock()
	s.pending = d
	s.mu.Unlock()
}

// SetIgnoreNetworkPolicy switches the no-sidecar simulation: for sandboxes
// created from now on (their network) and for every policy read-back.
func (s *Server) SetIgnoreNetworkPolicy(v bool) {
	s.mu.Lock()
	s.ignorePol = v
	s.mu.Unlock()
}

// Vanish removes a sandbox at once (backing sandbox destroyed, running
// commands' streams cut), as expiry does; it reports whether it existed.
func (s *Server) Vanish(id string) bool { return s.remove(id) }

func (s *Server) state(b *sbx) string {
	if b.forced != nil {
		return b.forced.State
	}
	if b.starting || time.Now().Before(b.readyAt) {
		return "Pending"
	}
	return "Running"
}

// startReal starts the real execd of sandbox b (Options.ExecdBinary) and
// makes it Running, or Failed with the reason.
func (s *Server) startReal(b *sbx, block bool, env map[string]string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go func() {
		select {
		case <-b.gone:
			cancel()
		case <-ctx.Done():
		}
	}()
	x, err := s.startRealExecd(ctx, b.id, block, env)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, alive := s.sandboxes[b.id]; !alive {
		if x != nil {
			go x.close()
		}
		return
	}
	b.starting = false
	if err != nil {
		b.forced = &status{State: "Failed", Reason: "EXECD_START_FAILED", Message: err.Error()}
		return
	}
	b.real = x
}

func (s *Server) sorted() []*sbx {
	out := make([]*sbx, 0, len(s.sandboxes))
	for _, b := range s.sandboxes {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].createdAt.Equal(out[j].createdAt) {
			return out[i].createdAt.Before(out[j].createdAt)
		}
		return out[i].id < out[j].id
	})
	return out
}

// remove deletes a sandbox and its backing sandbox.
func (s *Server) remove(id string) bool {
	s.mu.Lock()
	b, ok := s.sandboxes[id]
	var real *realExecd
	if ok {
		delete(s.sandboxes, id)
		if b.timer != nil {
			b.timer.Stop()
		}
		real = b.real
	}
	s.mu.Unlock()
	if !ok {
		return false
	}
	s.stopContainer(b)
	if real != nil {
		real.close()
	}
	s.destroyBacking(id)
	return true
}

func (s *Server) destroyBacking(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.drv.Destroy(ctx, id); err != nil {
		s.log.Warn("fake: could not destroy a backing sandbox", "id", id, "error", err)
	}
}

func (s *Server) lookup(id string) (*sbx, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.sandboxes[id]
	return b, ok
}

// ---- HTTP plumbing

type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func notFound(w http.ResponseWriter, id string) {
	writeJSON(w, http.StatusNotFound, apiError{Code: "DOCKER::SANDBOX_NOT_FOUND", Message: fmt.Sprintf("Sandbox %s not found.", id)})
}

// validation answers as FastAPI does for a malformed body.
func validation(w http.ResponseWriter, loc []string, msg string) {
	l := append([]any{"body"}, toAny(loc)...)
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": []map[string]any{{"loc": l, "msg": msg, "type": "value_error"}}})
}

// jsonInvalid answers as FastAPI does for a body that is not JSON.
func jsonInvalid(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": []map[string]any{{"loc": []any{"body"}, "msg": msg, "type": "json_invalid"}}})
}

func toAny(xs []string) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	api := func(pattern string, h http.HandlerFunc) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Request-ID", randHex(8))
			if !s.authorized(w, r) {
				return
			}
			h(w, r)
		})
	}
	api("POST /v1/sandboxes", s.handleCreate)
	api("GET /v1/sandboxes", s.handleList)
	api("GET /v1/sandboxes/{id}", s.handleGet)
	api("PATCH /v1/sandboxes/{id}/metadata", s.handlePatch)
	api("DELETE /v1/sandboxes/{id}", s.handleDelete)
	api("POST /v1/sandboxes/{id}/renew-expiration", s.handleRenew)
	api("GET /v1/sandboxes/{id}/endpoints/{port}", s.handleEndpoint)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "healthy"})
	})
	// The proxy route is not API-key checked, as on the real server, which
	// serves it with and without /v1.
	mux.HandleFunc("/sandboxes/{id}/proxy/{port}/{path...}", s.handleProxy)
	mux.HandleFunc("/v1/sandboxes/{id}/proxy/{port}/{path...}", s.handleProxy)
	return mux
}

func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	if s.opts.NoAuth {
		return true
	}
	got := r.Header.Get(APIKeyHeader)
	switch {
	case got == "":
		writeJSON(w, http.StatusUnauthorized, apiError{Code: "MISSING_API_KEY", Message: "Authentication credentials are missing. Provide API key via OPEN-SANDBOX-API-KEY header."})
		return false
	case got != s.APIKey:
		writeJSON(w, http.StatusUnauthorized, apiError{Code: "INVALID_API_KEY", Message: "Authentication credentials are invalid. Check your API key and try again."})
		return false
	}
	return true
}

// ---- lifecycle

type createBody struct {
	Image *struct {
		URI string `json:"uri"`
	} `json:"image"`
	Entrypoint     []string          `json:"entrypoint"`
	Timeout        *int64            `json:"timeout"`
	ResourceLimits map[string]string `json:"resourceLimits"`
	Env            map[string]string `json:"env"`
	Metadata       map[string]string `json:"metadata"`
	NetworkPolicy  *NetworkPolicy    `json:"networkPolicy"`
}

var labelRe = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`)

// checkMetadata applies Kubernetes label rules, as the server does.
func checkMetadata(meta map[string]*string) string {
	for k, v := range meta {
		name := k
		if prefix, rest, ok := strings.Cut(k, "/"); ok {
			if prefix == "opensandbox.io" || strings.HasSuffix(prefix, ".opensandbox.io") {
				return fmt.Sprintf("metadata key %q uses the reserved prefix opensandbox.io/", k)
			}
			name = rest
		}
		if name == "" || len(name) > 63 || !labelRe.MatchString(name) {
			return fmt.Sprintf("metadata key %q is not a valid label key", k)
		}
		if v != nil && (len(*v) > 63 || !labelRe.MatchString(*v)) {
			return fmt.Sprintf("metadata value %q of key %q is not a valid label value", *v, k)
		}
	}
	return ""
}

func ptrs(m map[string]string) map[string]*string {
	out := make(map[string]*string, len(m))
	for k, v := range m {
		out[k] = &v
	}
	return out
}

// backingNetwork decides how the backing sandbox's network is set up for
// a create-time policy: blocked (its own network namespace) or the host's.
// A policy it cannot enforce is refused (refusal != "").
func (s *Server) backingNetwork(p *NetworkPolicy, ignore bool) (block bool, refusal string) {
	switch {
	case p == nil:
		return false, "" // no policy, no sidecar: unrestricted, as on a real server
	case ignore || s.opts.UnenforcedNetworkPolicy:
		return false, ""
	}
	if p.DefaultAction == "allow" {
		for _, r := range p.Egress {
			if r.Action == "deny" {
				return false, fmt.Sprintf("networkPolicy: this server cannot enforce a deny rule (%q) under defaultAction allow: it can block the whole network but not single targets; deny by default and allow what is needed instead", r.Target)
			}
		}
		return false, ""
	}
	// Deny by default (a missing defaultAction is deny on the sidecar):
	// no network at all. Allow rules are reported back but reach nothing;
	// there is nothing to reach from here anyway.
	return true, ""
}

func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20+1))
	if err == nil && len(b) > 1<<20 {
		err = errBodyTooLarge
	}
	return b, err
}

// record is the JSON of a sandbox (with s.mu held).
func (s *Server) record(b *sbx) map[string]any {
	st := status{State: s.state(b), Reason: strings.ToUpper(s.state(b))}
	if b.forced != nil {
		st = *b.forced
	}
	rec := map[string]any{
		"id":         b.id,
		"image":      map[string]string{"uri": b.image},
		"status":     st,
		"entrypoint": b.entrypoint,
		"createdAt":  b.createdAt.Format(time.RFC3339Nano),
	}
	if len(b.metadata) > 0 {
		rec["metadata"] = b.metadata
	}
	if !b.expiresAt.IsZero() {
		rec["expiresAt"] = b.expiresAt.Format(time.RFC3339Nano)
	}
	return rec
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	if s.injected(RouteGet, w, r) {
		return
	}
	id := r.PathValue("id")
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.sandboxes[id]
	if !ok {
		notFound(w, id)
		return
	}
	writeJSON(w, http.StatusOK, s.record(b))
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	if s.injected(RouteList, w, r) {
		return
	}
	q := r.URL.Query()
	var match url.Values
	if m := q.Get("metadata"); m != "" {
		var err error
		if match, err = parseStrictQuery(m); err != nil {
			writeJSON(w, http.StatusBadRequest, apiError{Code: "INVALID_METADATA_FORMAT", Message: fmt.Sprintf("metadata filter %q is not a query string: %v", m, err)})
			return
		}
	}
	page, pageSize := 1, 20
	if v := q.Get("page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			validation(w, []string{"page"}, "Input should be greater than or equal to 1")
			return
		}
		page = n
	}
	if v := q.Get("pageSize"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 200 {
			validation(w, []string{"pageSize"}, "Input should be between 1 and 200")
			return
		}
		pageSize = n
	}
	states := q["state"]
	s.mu.Lock()
	var items []map[string]any
	for _, b := range s.sorted() {
		if len(states) > 0 && !contains(states, s.state(b)) {
			continue
		}
		ok := true
		for k, vs := range match {
			if got, has := b.metadata[k]; !has || got != vs[len(vs)-1] {
				ok = false
			}
		}
		if ok {
			items = append(items, s.record(b))
		}
	}
	s.mu.Unlock()
	total := len(items)
	from := min((page-1)*pageSize, total)
	to := min(from+pageSize, total)
	pages := (total + pageSize - 1) / pageSize
	writeJSON(w, http.StatusOK, map[string]any{
		"items": append([]map[string]any{}, items[from:to]...),
		"pagination": map[string]any{
			"page": page, "pageSize": pageSize, "totalItems": total, "totalPages": pages, "hasNextPage": page < pages,
		},
	})
}

// parseStrictQuery parses k=v&k=v as Python's parse_qsl(strict_parsing=True):
// every pair needs a key and an "=".
func parseStrictQuery(s string) (url.Values, error) {
	out := url.Values{}
	for _, pair := range strings.Split(s, "&") {
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("bad pair %q", pair)
		}
		ku, err := url.QueryUnescape(k)
		if err != nil {
			return nil, err
		}
		vu, err := url.QueryUnescape(v)
		if err != nil {
			return nil, err
		}
		out.Add(ku, vu)
	}
	return out, nil
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func (s *Server) handlePatch(w http.ResponseWriter, r *http.Request) {
	if s.injected(RoutePatch, w, r) {
		return
	}
	id := r.PathValue("id")
	var patch map[string]*string
	if err := json.NewDecoder(r.Body).Decode(&patch); err != nil {
		validation(w, nil, "JSON decode error: "+err.Error())
		return
	}
	if msg := checkMetadata(patch); msg != "" {
		writeJSON(w, http.StatusBadRequest, apiError{Code: "SANDBOX::INVALID_METADATA_LABEL", Message: msg})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.sandboxes[id]
	if !ok {
		notFound(w, id)
		return
	}
	for k, v := range patch {
		if v == nil {
			delete(b.metadata, k)
		} else {
			b.metadata[k] = *v
		}
	}
	writeJSON(w, http.StatusOK, s.record(b))
}

func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) {
	if s.injected(RouteDelete, w, r) {
		return
	}
	id := r.PathValue("id")
	if !s.remove(id) {
		notFound(w, id)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleRenew(w http.ResponseWriter, r *http.Request) {
	if s.injected(RouteRenew, w, r) {
		return
	}
	id := r.PathValue("id")
	var body struct {
		ExpiresAt time.Time `json:"expiresAt"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.ExpiresAt.IsZero() {
		validation(w, []string{"expiresAt"}, "Field required")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.sandboxes[id]
	switch {
	case !ok:
		notFound(w, id)
	case b.expiresAt.IsZero():
		writeJSON(w, http.StatusConflict, apiError{Code: "DOCKER::INVALID_EXPIRATION", Message: "Sandbox does not have automatic expiration enabled."})
	case !body.ExpiresAt.After(time.Now()):
		writeJSON(w, http.StatusBadRequest, apiError{Code: "DOCKER::INVALID_EXPIRATION", Message: "New expiration time must be in the future."})
	default:
		b.expiresAt = body.ExpiresAt.UTC()
		b.timer.Reset(time.Until(b.expiresAt)) // its function is s.expire
		writeJSON(w, http.StatusOK, map[string]string{"expiresAt": b.expiresAt.Format(time.RFC3339Nano)})
	}
}

// serveEgress is the sidecar's GET /policy.
func (s *Server) serveEgress(w http.ResponseWriter, r *http.Request, b *sbx, sub string) {
	if s.injected(RoutePolicy, w, r) {
		return
	}
	s.mu.Lock()
	ignore := s.ignorePol
	s.mu.Unlock()
	if b.policy == nil || sub != "/policy" || r.Method != http.MethodGet {
		// No policy, no sidecar: nothing listens on the port.
		http.Error(w, "Bad Gateway", http.StatusBadGateway)
		return
	}
	if r.Header.Get(EgressAuthHeader) != b.egressToken {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "unauthorized"})
		return
	}
	if ignore {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "mode": "allow_all", "enforcementMode": s.opts.EgressMode,
			"policy": map[string]any{"defaultAction": "allow", "egress": []Rule{}}})
		return
	}
	pol := *b.policy
	if pol.DefaultAction == "" {
		pol.DefaultAction = "deny" // the sidecar's reading of a missing default
	}
	mode := "enforcing"
	if pol.DefaultAction == "deny" && len(pol.Egress) == 0 {
		mode = "deny_all"
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "mode": mode, "enforcementMode": s.opts.EgressMode, "policy": pol})
}

var errBodyTooLarge = errors.New("request body too large")
