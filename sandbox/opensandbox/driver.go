// Package opensandbox is the driver.Driver for OpenSandbox
// (github.com/alibaba/OpenSandbox), built on OpenSandbox's official Go SDK
// (github.com/alibaba/OpenSandbox/sdks/sandbox/go, SDKVersion): its
// LifecycleClient (create, renew, delete, list by metadata, endpoints),
// ExecdClient (commands with streamed output, files, directories) and
// EgressClient (the sidecar's policy). The driver keeps what is its own:
// the mapping from driver.Spec, the error classes (final, retryable, not
// found), the ownership tags in metadata and the capabilities; and, below
// the SDK, guard.go's checks of execd's answers that the SDK does not make.
// It is verified with the execd builds VerifiedExecd names.
//
// Tags are stored as sandbox metadata (see metadata.go for the encoding).
// The Python provider cannot attach to OpenSandbox sandboxes; Go tasks can,
// through Tags/SetTags and sandbox.Attach.
package opensandbox

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	osdk "github.com/alibaba/OpenSandbox/sdks/sandbox/go"
	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/internal/poll"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// Backend is the driver's name.
const Backend = "opensandbox"

// Defaults, as the Python provider's.
const (
	DefaultImage        = "python:3.12-slim"
	DefaultCPU          = "1"
	DefaultMemory       = "2Gi"
	DefaultReadyTimeout = 120 * time.Second
	// MinTimeout is the shortest lifetime the lifecycle server accepts.
	MinTimeout = 60 * time.Second
	// execGrace is how long past a command's timeout the client waits for
	// execd to report the kill before giving up on the stream.
	execGrace = 30 * time.Second
	// cleanupTimeout bounds best-effort deletes made after a failure,
	// which run even when the caller's context is already done.
	cleanupTimeout = 30 * time.Second
)

// VerifiedExecd names the execd builds the driver was verified with, built
// from OpenSandbox's source (docs/opensandbox-execd.md); CI tests against
// testing/fakeopensandbox, which imitates each. The driver does not ask
// execd for a version: it learns what execd offers from its answers.
var VerifiedExecd = []string{"v1.0.18 (tag docker/execd/v1.0.18, 27726236)", "the main branch at 4db3a993"}

// SDKVersion is the OpenSandbox Go SDK the driver is built on and verified
// with (go.mod pins it).
const SDKVersion = osdk.Version

// DefaultEntrypoint keeps the sandbox's main process alive; work runs
// through execd.
var DefaultEntrypoint = osdk.DefaultEntrypoint

// Options configure the driver.
type Options struct {
	Config       Config
	ReadyTimeout time.Duration // provisioning, endpoint and policy checks; default 120 s
	Entrypoint   []string      // default ["tail","-f","/dev/null"]
	Image        string        // used when Spec.Image is empty; default python:3.12-slim
	// DefaultCPU and DefaultMemory are sent when the spec leaves cpu or
	// memory unset: OpenSandbox requires resource limits on every sandbox.
	DefaultCPU    string
	DefaultMemory string
	// RequireIPEgressEnforcement refuses to run blocked-network sandboxes on
	// servers whose egress sidecar filters only DNS (mode "dns", the
	// server default), where connections to literal IP addresses still
	// get out. With it off, such servers are accepted with a warning, as
	// the Python provider accepts them.
	RequireIPEgressEnforcement bool
	// StallTimeout is how long a command stream or a download may deliver
	// nothing before it is called broken (a retryable error, the command
	// interrupted); default 2 minutes. execd pings streams every 3 s.
	StallTimeout time.Duration
	Logger       hclog.Logger
	// Transport, when set, replaces the HTTP transport under every SDK
	// client (tests, proxies).
	Transport http.RoundTripper
}

// Driver implements driver.Driver on an OpenSandbox server.
type Driver struct {
	opts Options
	cfg  Config
	log  hclog.Logger
	hc   *http.Client // shared by every SDK client (client.go)

	lifeOnce sync.Once
	life     *osdk.LifecycleClient

	mu      sync.Mutex
	execd   map[string]*execd // by sandbox id
	workdir map[string]string
}

var _ driver.Driver = (*Driver)(nil)

// New checks the configuration. It makes no call and builds no SDK client
// yet: the lifecycle client is built at the first call.
func New(opts Options) (*Driver, error) {
	cfg := opts.Config
	if cfg.Domain == "" {
		return nil, errors.New("opensandbox: no server domain configured; set the connection's host or OPEN_SANDBOX_DOMAIN")
	}
	if cfg.Protocol == "" {
		cfg.Protocol = DefaultProtocol
	}
	if cfg.Protocol != "http" && cfg.Protocol != "https" {
		return nil, fmt.Errorf("opensandbox: protocol %q is not http or https", cfg.Protocol)
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = DefaultReadyTimeout
	}
	if len(opts.Entrypoint) == 0 {
		opts.Entrypoint = DefaultEntrypoint
	}
	if opts.Image == "" {
		opts.Image = DefaultImage
	}
	if opts.DefaultCPU == "" {
		opts.DefaultCPU = DefaultCPU
	}
	if opts.DefaultMemory == "" {
		opts.DefaultMemory = DefaultMemory
	}
	if opts.StallTimeout <= 0 {
		opts.StallTimeout = DefaultStallTimeout
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	d := &Driver{
		opts: opts, cfg: cfg, log: opts.Logger,
		hc:      newHTTPClient(opts),
		execd:   map[string]*execd{},
		workdir: map[string]string{},
	}
	return d, nil
}

// Backend returns "opensandbox".
func (d *Driver) Backend() string { return Backend }

// Capabilities: cpu, memory, a blocked or open network, host allowlists
// (the egress sidecar), tags (as metadata), listing, a server-side lifetime
// and renewal. No GPUs, and no CIDR allowlists, whose enforcement cannot be
// verified.
func (d *Driver) Capabilities() driver.Capabilities { return capabilities }

var capabilities = driver.Capabilities{CPU: true, Memory: true, BlockNetwork: true, OpenNetwork: true,
	AllowHosts: true, Tags: true, List: true, Lifetime: true, Renew: true,
	Hints: map[driver.Capability]string{driver.CapAllowCIDRs: "its egress sidecar enforces CIDR rules only in dns+nft mode, which cannot be verified; allow host names instead"}}

// As gives the SDK's lifecycle client (target
// *(*opensandbox.LifecycleClient) of the SDK's package) or the concrete
// driver.
func (d *Driver) As(target any) bool {
	switch p := target.(type) {
	case **osdk.LifecycleClient:
		*p = d.lifecycle()
	case **Driver:
		*p = d
	default:
		return false
	}
	return true
}

// Config is the connection configuration in use (API key included: do
// not log it; its String method hides the key).
func (d *Driver) Config() Config { return d.cfg }

// Lifecycle exposes the SDK's lifecycle client, for operations the
// portable API does not have (pause, snapshots, network policy patches).
func (d *Driver) Lifecycle() *osdk.LifecycleClient { return d.lifecycle() }

// Execd gives the SDK's execd client of a sandbox, for what the portable
// API does not have (background commands, code contexts, metrics). It
// carries the endpoint's headers and shares the driver's connections.
func (d *Driver) Execd(ctx context.Context, id string) (*osdk.ExecdClient, error) {
	x, err := d.execdFor(ctx, id)
	if err != nil {
		return nil, err
	}
	return x.c, nil
}

// Close drops idle connections; sandboxes are untouched.
func (d *Driver) Close() error {
	d.hc.CloseIdleConnections()
	return nil
}

// fail wraps err as a driver.Error, keeping its retryability.
func fail(op, id, path string, kind, err error) error {
	if err == nil && kind == nil {
		return nil
	}
	var se *driver.Error
	if kind == nil && errors.As(err, &se) {
		return err
	}
	e := &driver.Error{Op: op, Sandbox: id, Path: path, Kind: kind, Err: err}
	if kind == nil && driver.IsRetryable(classify(err)) {
		return driver.Retryable(e)
	}
	return e
}

// createRequest maps a spec onto the create body. What OpenSandbox cannot
// enforce (or we cannot verify) in a spec (SpecProblems) the portable layer
// has refused already, before anything is provisioned; a direct caller of
// the driver gets the same refusal from CheckUnstamped.
func (d *Driver) createRequest(name string, spec driver.Spec) (osdk.CreateSandboxRequest, error) {
	if err := driver.CheckUnstamped(d, name, spec); err != nil {
		return osdk.CreateSandboxRequest{}, err
	}
	var errs []string
	net := spec.NetworkPolicy()
	cpu := d.opts.DefaultCPU
	if milli := math.Round(spec.CPU * 1000); spec.CPU > 0 && milli >= 1 {
		if math.Mod(milli, 1000) == 0 {
			cpu = fmt.Sprintf("%d", int64(milli/1000))
		} else {
			cpu = fmt.Sprintf("%dm", int64(milli))
		}
	}
	mem := d.opts.DefaultMemory
	if spec.MemoryMiB > 0 {
		mem = fmt.Sprintf("%dMi", spec.MemoryMiB)
	}
	meta, err := encodeTags(spec.Tags)
	if err != nil {
		errs = append(errs, "tags: "+err.Error())
	}
	if len(errs) > 0 {
		return osdk.CreateSandboxRequest{}, driver.Refused("the opensandbox backend refuses this spec: %s", strings.Join(errs, "; "))
	}
	meta[metaCreatedBy] = metaCreatedByValue
	meta[metaName] = name
	image := spec.Image
	if image == "" {
		image = d.opts.Image
	}
	secs := int(spec.Lifetime / time.Second)
	req := osdk.CreateSandboxRequest{
		Image:          &osdk.ImageSpec{URI: image},
		Entrypoint:     d.opts.Entrypoint,
		Timeout:        &secs,
		ResourceLimits: osdk.ResourceLimits{"cpu": cpu, "memory": mem},
		Env:            spec.Env,
		Metadata:       meta,
	}
	if !net.Open {
		// Always explicit: the sidecar reads a missing default as deny,
		// the spec text says allow; never leave it to interpretation.
		req.NetworkPolicy = &osdk.NetworkPolicy{DefaultAction: "deny"}
		for _, h := range net.AllowHosts {
			req.NetworkPolicy.Egress = append(req.NetworkPolicy.Egress, osdk.NetworkRule{Action: "allow", Target: h})
		}
	}
	return req, nil
}

// Create provisions the sandbox, waits until it runs and execd answers,
// verifies a blocked network is enforced, and creates the workdir. Any
// failure after the server accepted the sandbox deletes it.
func (d *Driver) Create(ctx context.Context, name string, spec driver.Spec) (driver.Info, error) {
	spec = spec.WithDefaults() // for direct callers; the portable layer's spec has them
	req, err := d.createRequest(name, spec)
	if err != nil {
		return driver.Info{}, err
	}
	deadline := time.Now().Add(d.opts.ReadyTimeout)
	rec, err := d.lifecycle().CreateSandbox(ctx, req)
	err = callError("create sandbox", err)
	if err == nil && rec.ID == "" {
		err = errors.New("OpenSandbox could not create sandbox: the server answered without a sandbox id; check that the domain points at an OpenSandbox lifecycle server")
	}
	if err != nil {
		var api *APIError
		if !errors.As(err, &api) || api.Retryable() {
			// The server may have created it before the answer was lost.
			d.deleteByName(ctx, name)
		}
		return driver.Info{}, fail("create", name, "", nil, err)
	}
	id := rec.ID
	d.log.Debug("opensandbox sandbox accepted", "id", id, "name", name, "state", rec.Status.State)
	abort := func(err error) (driver.Info, error) {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if derr := d.deleteSandbox(dctx, id); derr != nil {
			d.log.Warn("could not delete a sandbox that failed to start; the server's timeout will remove it", "id", id, "error", derr)
		}
		d.forget(id)
		return driver.Info{}, err
	}
	if rec, err = d.waitRunning(ctx, id, deadline); err != nil {
		return abort(err)
	}
	ex, err := d.connectExecd(ctx, id, deadline)
	if err != nil {
		return abort(err)
	}
	if net := spec.NetworkPolicy(); !net.Open {
		if err := d.verifyEgress(ctx, id, net.AllowHosts, deadline); err != nil {
			return abort(err)
		}
	}
	if err := d.ensureWorkdir(ctx, ex, id, spec.Workdir); err != nil {
		return abort(err)
	}
	d.mu.Lock()
	d.workdir[id] = spec.Workdir
	d.mu.Unlock()
	return d.info(rec), nil
}

// ensureWorkdir creates the workdir when it is missing, and only then:
// execd re-applies the mode of an existing directory (a workdir of /tmp
// would lose its 1777).
func (d *Driver) ensureWorkdir(ctx context.Context, ex *execd, id, wd string) error {
	kind, _, err := d.follow(ctx, ex, id, "create", wd)
	switch {
	case err == nil && kind == "directory":
		return nil
	case err == nil:
		return &driver.Error{Op: "create", Sandbox: id, Path: wd, Err: fmt.Errorf("the workdir exists in the image and is not a directory (%s); choose another workdir", kind)}
	case !errors.Is(err, driver.ErrNotFound):
		return fail("create", id, wd, nil, fmt.Errorf("checking the workdir: %w", err))
	}
	if err := ex.mkdir(ctx, wd, 0o755); err != nil {
		return fail("create", id, wd, nil, fmt.Errorf("creating the workdir (a symlink that leads nowhere cannot be one): %w", err))
	}
	return nil
}

// deleteByName removes sandboxes named name, best effort.
func (d *Driver) deleteByName(ctx context.Context, name string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	recs, err := d.listSandboxes(dctx, map[string]string{metaName: name})
	if err != nil {
		d.log.Warn("could not check whether a failed create left a sandbox behind; the server's timeout will remove it", "name", name, "error", err)
		return
	}
	for _, r := range recs {
		if err := d.deleteSandbox(dctx, r.ID); err != nil {
			d.log.Warn("could not delete a sandbox left by a failed create", "id", r.ID, "error", err)
		}
	}
}

// waitRunning polls until the sandbox is Running. Failed, Terminated and
// a vanished sandbox end the wait; unknown states and transient errors are
// waited out until deadline.
func (d *Driver) waitRunning(ctx context.Context, id string, deadline time.Time) (*osdk.SandboxInfo, error) {
	var last string
	var running *osdk.SandboxInfo
	err := poll.Until(ctx, time.Until(deadline), readyPace, func() (bool, error) {
		rec, err := d.getSandbox(ctx, id)
		if err != nil {
			if notFound(err) {
				return false, fail("create", id, "", driver.ErrGone, errors.New("the sandbox disappeared while starting; check the server's logs (image pull, resources)"))
			}
			if driver.IsRetryable(classify(err)) {
				last = err.Error()
				return false, nil
			}
			return false, fail("create", id, "", nil, err)
		}
		switch rec.Status.State {
		case osdk.StateRunning:
			running = rec
			return true, nil
		case osdk.StateFailed, osdk.StateTerminated:
			return false, fail("create", id, "", nil, fmt.Errorf("the sandbox is %s (%s) instead of starting; check the image and the resource limits", rec.Status.State, statusText(rec.Status)))
		}
		last = "state " + string(rec.Status.State)
		return false, nil
	})
	if errors.Is(err, poll.ErrTimeout) {
		return nil, driver.Retryable(&driver.Error{Op: "create", Sandbox: id, Err: fmt.Errorf("the sandbox was not Running within %v (last seen: %s); the server may be busy pulling the image; raise the ready timeout or retry", d.opts.ReadyTimeout, last)})
	}
	if err != nil {
		return nil, err
	}
	return running, nil
}

func statusText(s osdk.SandboxStatus) string {
	parts := []string{}
	if s.Reason != "" {
		parts = append(parts, s.Reason)
	}
	if s.Message != "" {
		parts = append(parts, s.Message)
	}
	if len(parts) == 0 {
		return "no reason given"
	}
	return strings.Join(parts, ": ")
}

// readyPace is how often a starting sandbox, its execd and its egress
// sidecar are asked again: soon at first, then at most every 2 s.
var readyPace = poll.Doubling(100*time.Millisecond, 2*time.Second)

// connectExecd looks up execd's endpoint and waits until /ping answers.
func (d *Driver) connectExecd(ctx context.Context, id string, deadline time.Time) (*execd, error) {
	ex, err := d.lookupExecd(ctx, id)
	if err != nil {
		return nil, err
	}
	var last error
	err = poll.Until(ctx, time.Until(deadline), readyPace, func() (bool, error) {
		last = ex.ping(ctx)
		return last == nil, nil
	})
	if errors.Is(err, poll.ErrTimeout) {
		return nil, driver.Retryable(&driver.Error{Op: "create", Sandbox: id, Err: fmt.Errorf("execd in the sandbox did not answer within %v: %v", d.opts.ReadyTimeout, last)})
	}
	if err != nil {
		return nil, fail("create", id, "", nil, err)
	}
	return ex, nil
}

// lookupExecd resolves execd's endpoint and caches the client.
func (d *Driver) lookupExecd(ctx context.Context, id string) (*execd, error) {
	u, headers, err := d.endpoint(ctx, id, ExecdPort)
	if err != nil {
		if notFound(err) {
			return nil, fail("connect", id, "", driver.ErrGone, err)
		}
		return nil, fail("connect", id, "", nil, err)
	}
	// The endpoint's headers (execd's access token, routing) go on every
	// request; the token is not the SDK's to set.
	ex := d.newExecd(u, headers)
	d.mu.Lock()
	d.execd[id] = ex
	d.mu.Unlock()
	return ex, nil
}

// newExecd is the execd client for the endpoint u, whose requests carry
// headers.
func (d *Driver) newExecd(u string, headers map[string]string) *execd {
	return &execd{
		c:    osdk.NewExecdClient(u, "", d.sdkOptions(headers)...),
		long: osdk.NewExecdClient(u, "", append(d.sdkOptions(headers), osdk.WithTimeout(0))...),
		base: u, headers: headers, hc: d.hc,
	}
}

// execdFor returns the cached execd client of a sandbox, or looks it up
// (sandboxes created by another process or task).
func (d *Driver) execdFor(ctx context.Context, id string) (*execd, error) {
	d.mu.Lock()
	ex := d.execd[id]
	d.mu.Unlock()
	if ex != nil {
		return ex, nil
	}
	return d.lookupExecd(ctx, id)
}

func (d *Driver) forget(id string) {
	d.mu.Lock()
	delete(d.execd, id)
	delete(d.workdir, id)
	d.mu.Unlock()
}

// verifyEgress reads the policy back from the egress sidecar and fails,
// terminally, unless it denies by default and allows exactly hosts.
func (d *Driver) verifyEgress(ctx context.Context, id string, hosts []string, deadline time.Time) error {
	refuse := func(why string) error {
		return &driver.Error{Op: "create", Sandbox: id, Kind: driver.ErrRefused, Err: fmt.Errorf(
			"OpenSandbox did not enforce the requested network policy (%s); the server may be running without its egress sidecar (configure [egress] image on the server) or ignore policies; the sandbox was destroyed", why)}
	}
	var got *osdk.PolicyStatusResponse
	var last error
	err := poll.Until(ctx, time.Until(deadline), readyPace, func() (bool, error) {
		var err error
		got, err = d.egressPolicy(ctx, id)
		if err == nil {
			return true, nil
		}
		last = err
		if driver.IsRetryable(classify(err)) {
			return false, nil // the sidecar may still be starting
		}
		return false, refuse(fmt.Sprintf("its policy could not be read: %v", err))
	})
	if errors.Is(err, poll.ErrTimeout) {
		return refuse(fmt.Sprintf("its policy could not be read within %v: %v", d.opts.ReadyTimeout, last))
	}
	if err != nil {
		return err
	}
	if ok, why := enforces(got, hosts); !ok {
		return refuse(why)
	}
	if mode := strings.ToLower(got.EnforcementMode); mode == "dns" || mode == "" {
		if d.opts.RequireIPEgressEnforcement {
			return refuse(fmt.Sprintf("the sidecar's enforcement mode is %q, which does not block connections to IP addresses; run the server with [egress] mode = \"dns+nft\"", got.EnforcementMode))
		}
		d.log.Warn("the OpenSandbox egress sidecar filters DNS only: connections to literal IP addresses are not blocked; use [egress] mode = \"dns+nft\" on the server for a strict block", "id", id, "enforcement_mode", got.EnforcementMode)
	}
	return nil
}

// info builds a driver.Info from a lifecycle record.
func (d *Driver) info(rec *osdk.SandboxInfo) driver.Info {
	tags := decodeTags(rec.Metadata)
	info := driver.Info{
		ID: rec.ID, Name: rec.Metadata[metaName], Backend: Backend,
		Workdir: tags[driver.TagWorkdir], CreatedAt: rec.CreatedAt, Tags: tags,
	}
	if rec.ExpiresAt != nil {
		info.ExpiresAt = *rec.ExpiresAt
	}
	if info.Name == "" {
		info.Name = tags[driver.TagSandbox]
	}
	return info
}

// record gets a sandbox's record, mapping a missing, terminated or failed
// sandbox to ErrGone.
func (d *Driver) record(ctx context.Context, op, id string) (*osdk.SandboxInfo, error) {
	rec, err := d.getSandbox(ctx, id)
	if err != nil {
		if notFound(err) {
			d.forget(id)
			return nil, fail(op, id, "", driver.ErrGone, err)
		}
		return nil, fail(op, id, "", nil, err)
	}
	if rec.Status.State == osdk.StateTerminated || rec.Status.State == osdk.StateFailed {
		d.forget(id)
		return nil, fail(op, id, "", driver.ErrGone, fmt.Errorf("the sandbox is %s (%s)", rec.Status.State, statusText(rec.Status)))
	}
	return rec, nil
}

// Info describes a sandbox; ErrGone when it no longer exists or has stopped.
func (d *Driver) Info(ctx context.Context, id string) (driver.Info, error) {
	rec, err := d.record(ctx, "info", id)
	if err != nil {
		return driver.Info{}, err
	}
	return d.info(rec), nil
}

// Tags returns the sandbox's tags, decoded from its metadata.
func (d *Driver) Tags(ctx context.Context, id string) (map[string]string, error) {
	rec, err := d.record(ctx, "read tags", id)
	if err != nil {
		return nil, err
	}
	return decodeTags(rec.Metadata), nil
}

// SetTags replaces the tag set with one metadata merge patch; the Python
// provider's created-by and name keys are kept.
func (d *Driver) SetTags(ctx context.Context, id string, tags map[string]string) error {
	want, err := encodeTags(tags)
	if err != nil {
		return &driver.Error{Op: "set tags", Sandbox: id, Err: err}
	}
	rec, err := d.record(ctx, "set tags", id)
	if err != nil {
		return err
	}
	patch := metadataPatch(rec.Metadata, want, map[string]bool{metaCreatedBy: true, metaName: true})
	if len(patch) == 0 {
		return nil
	}
	if _, err := d.lifecycle().PatchSandboxMetadata(ctx, id, patch); err != nil {
		err = callError("update metadata of sandbox "+id, err)
		if notFound(err) {
			return fail("set tags", id, "", driver.ErrGone, err)
		}
		return fail("set tags", id, "", nil, err)
	}
	return nil
}

// ListSandboxes lists live sandboxes whose tags include every pair of
// match. The filter runs on the server (on the encoded metadata) and again
// here on the decoded tags.
func (d *Driver) ListSandboxes(ctx context.Context, match map[string]string) ([]driver.Info, error) {
	filter, err := encodeTags(match)
	if err != nil {
		return nil, &driver.Error{Op: "list sandboxes", Err: err}
	}
	recs, err := d.listSandboxes(ctx, filter)
	if err != nil {
		return nil, fail("list sandboxes", "", "", nil, err)
	}
	var out []driver.Info
	for i := range recs {
		rec := &recs[i]
		if rec.Status.State == osdk.StateTerminated || rec.Status.State == osdk.StateFailed {
			continue
		}
		info := d.info(rec)
		ok := true
		for k, v := range match {
			if info.Tags[k] != v {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, info)
		}
	}
	return out, nil
}

// Destroy deletes the sandbox; one already gone is not an error.
func (d *Driver) Destroy(ctx context.Context, id string) error {
	defer d.forget(id)
	if err := d.deleteSandbox(ctx, id); err != nil {
		return fail("destroy", id, "", nil, err)
	}
	return nil
}

// Renew moves the sandbox's expiry to now+extend and updates its
// airflow_expires_at tag; it returns the new expiry.
func (d *Driver) Renew(ctx context.Context, id string, extend time.Duration) (time.Time, error) {
	// Whole seconds: the lifecycle server keeps no finer time.
	resp, err := d.lifecycle().RenewExpiration(ctx, id, time.Now().Add(extend).Truncate(time.Second))
	if err != nil {
		err = callError("renew expiration of sandbox "+id, err)
		if notFound(err) {
			return time.Time{}, fail("renew", id, "", driver.ErrGone, err)
		}
		return time.Time{}, fail("renew", id, "", nil, err)
	}
	at := resp.ExpiresAt
	tags, err := d.Tags(ctx, id)
	if err == nil {
		if _, ok := tags[driver.TagExpiresAt]; ok {
			tags[driver.TagExpiresAt] = fmt.Sprint(at.Unix())
			err = d.SetTags(ctx, id, tags)
		}
	}
	return at, err
}
