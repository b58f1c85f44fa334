// Package modal is the driver.Driver for Modal, on the official Go SDK
// (github.com/modal-labs/modal-client/go). Sandboxes it creates carry the
// ownership tags the Python provider reads, so a Python SandboxToolset can
// attach to them, and it can attach to theirs.
package modal

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	modal "github.com/modal-labs/modal-client/go"
	"google.golang.org/grpc/codes"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// Defaults, as the Python provider's ModalSandboxBackend has them.
const (
	DefaultAppName = "airflow-sandbox"
	DefaultImage   = "python:3.12-slim"
	// MinTimeout is the shortest lifetime accepted: shorter ones are
	// reclaimed before a task can do anything useful with them.
	MinTimeout = 120 * time.Second
)

// Options configure the driver.
type Options struct {
	// Credentials from the modal connection; empty tokens mean the SDK's own
	// resolution (MODAL_TOKEN_ID/MODAL_TOKEN_SECRET, then ~/.modal.toml).
	Credentials Credentials
	AppName     string // default "airflow-sandbox"
	// DisableCreateApp makes a missing app an error instead of creating it.
	DisableCreateApp bool
	// EgressEnforcement is "strict" (default) or "sni"; see EgressSNI.
	EgressEnforcement string
	Regions           []string // placement; nil = Modal's choice
	Cloud             string   // "aws", "gcp", "oci"; "" = Modal's choice
	Logger            hclog.Logger
	// Retries is how many times a retryable create or exec start is tried
	// again (default 3); RetryDelay the first backoff (default 250ms).
	Retries    int
	RetryDelay time.Duration
}

// Driver is a driver.Driver backed by Modal.
type Driver struct {
	opts   Options
	log    hclog.Logger
	client *modal.Client

	appMu sync.Mutex
	app   *modal.App

	imageMu sync.Mutex
	images  map[string]*modal.Image // built, by registry tag

	mu      sync.Mutex
	handles map[string]*modal.Sandbox // by sandbox id; reuses router connections
}

var _ driver.Driver = (*Driver)(nil)

// New builds a driver. It makes no RPC: credentials are checked by the
// first call that needs them. The SDK reads the server URL only from
// MODAL_SERVER_URL or the profile.
func New(ctx context.Context, opts Options) (*Driver, error) {
	if opts.AppName == "" {
		opts.AppName = DefaultAppName
	}
	switch opts.EgressEnforcement {
	case "":
		opts.EgressEnforcement = EgressStrict
	case EgressStrict, EgressSNI:
	default:
		return nil, fmt.Errorf("modal driver: egress_enforcement %q is not one of %q or %q", opts.EgressEnforcement, EgressStrict, EgressSNI)
	}
	if opts.Retries <= 0 {
		opts.Retries = 3
	}
	if opts.RetryDelay <= 0 {
		opts.RetryDelay = 250 * time.Millisecond
	}
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	creds := opts.Credentials
	if (creds.TokenID == "") != (creds.TokenSecret == "") {
		return nil, fmt.Errorf("modal driver: %s has only one of token id and token secret; set both or neither", creds)
	}
	client, err := modal.NewClientWithOptions(&modal.ClientParams{
		TokenID: creds.TokenID, TokenSecret: creds.TokenSecret, Environment: creds.Environment,
		Logger: newSlogBridge(log),
	})
	if err != nil {
		return nil, fmt.Errorf("modal driver: cannot build the Modal client (%s): %v", creds, err)
	}
	return &Driver{opts: opts, log: log, client: client, handles: map[string]*modal.Sandbox{}, images: map[string]*modal.Image{}}, nil
}

// Backend is "modal".
func (d *Driver) Backend() string { return "modal" }

// Capabilities: cpu, memory, GPUs, a blocked or open network, CIDR
// allowlists, host allowlists when egress enforcement is "sni", tags,
// listing and a server-side lifetime.
func (d *Driver) Capabilities() driver.Capabilities { return capabilities(d.opts.EgressEnforcement) }

func capabilities(egress string) driver.Capabilities {
	return driver.Capabilities{CPU: true, Memory: true, GPU: true, BlockNetwork: true, OpenNetwork: true,
		AllowCIDRs: true, AllowHosts: egress == EgressSNI, Tags: true, List: true, Lifetime: true,
		Hints: map[driver.Capability]string{driver.CapAllowHosts: "Modal can only allow hostnames by TLS SNI: set the modal option egress_enforcement: sni, or allow the hosts' IPv4 ranges with allow_cidrs"}}
}

// As gives the Modal SDK client (target *(*modal.Client) of
// github.com/modal-labs/modal-client/go) or the concrete driver.
func (d *Driver) As(target any) bool {
	switch p := target.(type) {
	case **modal.Client:
		*p = d.client
	case **Driver:
		*p = d
	default:
		return false
	}
	return true
}

// Close closes the SDK client and its connections.
func (d *Driver) Close() error {
	d.mu.Lock()
	for id, sb := range d.handles {
		sb.Detach() //nolint:errcheck // never fails
		delete(d.handles, id)
	}
	d.mu.Unlock()
	d.client.Close()
	return nil
}

// handle returns the cached SDK handle for id, making one (no RPC) if needed.
func (d *Driver) handle(ctx context.Context, id string) (*modal.Sandbox, error) {
	if !strings.HasPrefix(id, "sb-") {
		return nil, &driver.Error{Op: "open", Sandbox: id, Kind: driver.ErrGone,
			Err: fmt.Errorf("%q is not a Modal sandbox id (sb-...); pass the id the provisioning task returned", id)}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if sb := d.handles[id]; sb != nil {
		return sb, nil
	}
	sb, err := d.client.Sandboxes.FromID(ctx, id, nil)
	if err != nil {
		return nil, mapErr("open", id, err)
	}
	d.handles[id] = sb
	return sb, nil
}

func (d *Driver) forget(id string) {
	d.mu.Lock()
	sb := d.handles[id]
	delete(d.handles, id)
	d.mu.Unlock()
	if sb != nil {
		sb.Detach() //nolint:errcheck // never fails
	}
}

// appHandle looks the app up once (creating it unless disabled).
func (d *Driver) appHandle(ctx context.Context) (*modal.App, error) {
	d.appMu.Lock()
	defer d.appMu.Unlock()
	if d.app != nil {
		return d.app, nil
	}
	var app *modal.App
	err := d.retry(ctx, "look up app", "", func() error {
		var err error
		app, err = d.client.Apps.FromName(ctx, d.opts.AppName, &modal.AppFromNameParams{
			Environment: d.opts.Credentials.Environment, CreateIfMissing: !d.opts.DisableCreateApp,
		})
		var nf modal.NotFoundError
		if errors.As(err, &nf) {
			return &driver.Error{Op: "look up app", Kind: driver.ErrRejected, Err: fmt.Errorf("Modal app %q does not exist in environment %q and creating it is disabled; deploy or create the app, or enable create_app_if_missing (%v); %s", d.opts.AppName, d.opts.Credentials.Environment, err, credentialHint)}
		}
		return mapErr("look up app", "", err)
	})
	if err != nil {
		return nil, err
	}
	d.app = app
	return app, nil
}

// image returns the built SDK image for a registry tag, building it once:
// later creates then skip the ImageGetOrCreate round trip, and no two
// creates race on the SDK's lazily filled image id.
func (d *Driver) image(ctx context.Context, app *modal.App, tag string) (*modal.Image, error) {
	d.imageMu.Lock()
	defer d.imageMu.Unlock()
	if img := d.images[tag]; img != nil {
		return img, nil
	}
	var built *modal.Image
	err := d.retry(ctx, "build image", "", func() error {
		var err error
		built, err = d.client.Images.FromRegistry(tag, nil).Build(ctx, app, nil)
		if err != nil {
			return mapErr("build image "+tag, "", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	d.images[tag] = built
	return built, nil
}

// retry runs fn until it succeeds, fails terminally, or the attempts run out.
func (d *Driver) retry(ctx context.Context, op, id string, fn func() error) error {
	delay := d.opts.RetryDelay
	var err error
	for attempt := 0; ; attempt++ {
		if err = fn(); err == nil || !driver.IsRetryable(err) || attempt >= d.opts.Retries {
			return err
		}
		d.log.Warn("retrying after a transient Modal error", "op", op, "sandbox", id, "attempt", attempt+1, "error", err)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return err
		}
		delay *= 2
	}
}

// Create provisions a Modal sandbox named name.
func (d *Driver) Create(ctx context.Context, name string, spec driver.Spec) (driver.Info, error) {
	params, err := d.createParams(name, spec)
	if err != nil {
		return driver.Info{}, err
	}
	app, err := d.appHandle(ctx)
	if err != nil {
		return driver.Info{}, err
	}
	image := spec.Image
	if image == "" {
		image = DefaultImage
	}
	img, err := d.image(ctx, app, image)
	if err != nil {
		return driver.Info{}, err
	}

	var sb *modal.Sandbox
	maybeCreated := false
	err = d.retry(ctx, "create", "", func() error {
		var err error
		sb, err = d.client.Sandboxes.Create(ctx, app, img, params)
		var exists modal.AlreadyExistsError
		if errors.As(err, &exists) && maybeCreated {
			// An earlier attempt did create it before its answer was lost:
			// the name is ours (random), so adopt that sandbox.
			sb, err = d.client.Sandboxes.FromName(ctx, app.Name, name, &modal.SandboxFromNameParams{Environment: d.opts.Credentials.Environment})
		}
		if err != nil {
			maybeCreated = maybeCreated || mayHaveCreated(err)
		}
		return mapErr("create", "", err)
	})
	if err != nil {
		if maybeCreated || mayHaveCreated(err) {
			d.reap(ctx, app.Name, name)
		}
		return driver.Info{}, err
	}
	d.mu.Lock()
	d.handles[sb.SandboxID] = sb
	d.mu.Unlock()
	d.log.Debug("created modal sandbox", "id", sb.SandboxID, "name", name)
	return driver.Info{
		ID: sb.SandboxID, Name: name, Backend: d.Backend(), Workdir: spec.Workdir,
		CreatedAt: time.Now(), ExpiresAt: driver.ExpiresAt(spec.Tags), Tags: maps.Clone(spec.Tags),
	}, nil
}

// mayHaveCreated: the create failed in a way that does not prove Modal
// refused it, so a sandbox may exist.
func mayHaveCreated(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	code, ok := grpcCode(err)
	if !ok {
		var exhausted modal.ResourceExhaustedError
		return errors.As(err, &exhausted)
	}
	switch code {
	case codes.Unauthenticated, codes.PermissionDenied, codes.InvalidArgument, codes.AlreadyExists, codes.NotFound, codes.FailedPrecondition:
		return false
	}
	return true
}

// reap terminates the sandbox a failed create may have left behind, found
// by its (random, ours) name, so a failure never leaks a billed sandbox.
func (d *Driver) reap(ctx context.Context, appName, name string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	sb, err := d.client.Sandboxes.FromName(ctx, appName, name, &modal.SandboxFromNameParams{Environment: d.opts.Credentials.Environment})
	var nf modal.NotFoundError
	if errors.As(err, &nf) {
		return
	}
	if err != nil {
		d.log.Warn("could not check for a sandbox left by a failed create; it expires with its lifetime", "name", name, "error", err)
		return
	}
	if _, err := sb.Terminate(ctx, nil); err != nil {
		d.log.Warn("could not terminate a sandbox left by a failed create; it expires with its lifetime", "id", sb.SandboxID, "error", err)
	} else {
		d.log.Info("terminated a sandbox left by a failed create", "id", sb.SandboxID, "name", name)
	}
	sb.Detach() //nolint:errcheck
}

// createParams maps the spec before any RPC is made. What Modal refuses in
// a spec (SpecProblems) the portable layer has refused already; a spec it
// did not stamp with the ownership tags is refused here, so a direct caller
// of the driver cannot skip that check.
func (d *Driver) createParams(name string, spec driver.Spec) (*modal.SandboxCreateParams, error) {
	for _, k := range []string{driver.TagSandbox, driver.TagExpiresAt, driver.TagNetwork} {
		if spec.Tags[k] == "" {
			return nil, &driver.Error{Op: "create", Kind: driver.ErrRefused, Err: fmt.Errorf("ownership tag %s is missing: the driver was called directly; create sandboxes through the portable API (sandbox.NewBackend(driver).Create), which stamps the ownership tags", k)}
		}
	}
	if spec.Tags[driver.TagSandbox] != name {
		return nil, &driver.Error{Op: "create", Kind: driver.ErrRefused, Err: fmt.Errorf("tag %s=%q does not match the sandbox name %q", driver.TagSandbox, spec.Tags[driver.TagSandbox], name)}
	}
	if spec.Owner != "" && spec.Tags[driver.TagOwner] != spec.Owner {
		return nil, &driver.Error{Op: "create", Kind: driver.ErrRefused, Err: fmt.Errorf("tag %s does not carry the owner %q", driver.TagOwner, spec.Owner)}
	}
	net, err := mapNetwork(spec.NetworkPolicy(), d.opts.EgressEnforcement)
	if err != nil {
		return nil, err
	}
	if net.warning != "" {
		d.log.Warn(net.warning, "name", name)
	}
	return &modal.SandboxCreateParams{
		Name:      name,
		Timeout:   spec.Lifetime,
		Workdir:   spec.Workdir,
		Env:       maps.Clone(spec.Env),
		CPU:       spec.CPU,
		MemoryMiB: spec.MemoryMiB,
		GPU:       spec.GPU,
		Regions:   d.opts.Regions,
		Cloud:     d.opts.Cloud,
		Tags:      maps.Clone(spec.Tags),
		// IdleTimeout stays unset: an attachable sandbox sits idle between
		// the provisioning task and the agent task, and Modal would reclaim
		// it there (the Python provider refuses owner + idle_timeout).
		BlockNetwork:            net.block,
		OutboundCIDRAllowlist:   net.cidrs,
		OutboundDomainAllowlist: net.domains,
	}, nil
}

// Info reads the sandbox's tags (workdir, expiry) and whether it still runs.
func (d *Driver) Info(ctx context.Context, id string) (driver.Info, error) {
	tags, err := d.Tags(ctx, id)
	if err != nil {
		return driver.Info{}, err
	}
	if alive, err := d.alive(ctx, id); err != nil {
		return driver.Info{}, err
	} else if !alive {
		return driver.Info{}, &driver.Error{Op: "info", Sandbox: id, Kind: driver.ErrGone, Err: errors.New("the sandbox has finished (terminated or past its lifetime)")}
	}
	wd := tags[driver.TagWorkdir]
	if wd == "" {
		wd = driver.DefaultWorkdir
	}
	return driver.Info{ID: id, Name: tags[driver.TagSandbox], Backend: d.Backend(), Workdir: wd,
		ExpiresAt: driver.ExpiresAt(tags), Tags: tags}, nil
}

// alive polls the sandbox once: false once it has finished.
func (d *Driver) alive(ctx context.Context, id string) (bool, error) {
	sb, err := d.handle(ctx, id)
	if err != nil {
		return false, err
	}
	code, err := sb.Poll(ctx, nil)
	if err != nil {
		err = mapErr("poll", id, err)
		if isGone(err) {
			return false, nil
		}
		return false, err
	}
	return code == nil, nil
}

// Tags reads the whole tag set.
func (d *Driver) Tags(ctx context.Context, id string) (map[string]string, error) {
	sb, err := d.handle(ctx, id)
	if err != nil {
		return nil, err
	}
	tags, err := sb.GetTags(ctx, nil)
	if err != nil {
		return nil, mapErr("read tags", id, err)
	}
	return tags, nil
}

// SetTags replaces the whole tag set.
func (d *Driver) SetTags(ctx context.Context, id string, tags map[string]string) error {
	sb, err := d.handle(ctx, id)
	if err != nil {
		return err
	}
	return mapErr("write tags", id, sb.SetTags(ctx, tags, nil))
}

// ListSandboxes lists the app's running sandboxes carrying every tag in match.
func (d *Driver) ListSandboxes(ctx context.Context, match map[string]string) ([]driver.Info, error) {
	app, err := d.appHandle(ctx)
	if err != nil {
		return nil, err
	}
	it, err := d.client.Sandboxes.List(ctx, &modal.SandboxListParams{AppID: app.AppID, Tags: match})
	if err != nil {
		return nil, mapErr("list sandboxes", "", err)
	}
	var out []driver.Info
	for sb, err := range it {
		if err != nil {
			return nil, mapErr("list sandboxes", "", err)
		}
		tags, err := sb.GetTags(ctx, nil)
		sb.Detach() //nolint:errcheck
		if err != nil {
			if isGone(mapErr("read tags", sb.SandboxID, err)) {
				continue // finished while we listed
			}
			return nil, mapErr("read tags", sb.SandboxID, err)
		}
		wd := tags[driver.TagWorkdir]
		out = append(out, driver.Info{ID: sb.SandboxID, Name: tags[driver.TagSandbox], Backend: d.Backend(),
			Workdir: wd, ExpiresAt: driver.ExpiresAt(tags), Tags: tags})
	}
	return out, nil
}

// Destroy terminates the sandbox without waiting for it to stop; a sandbox
// that is already gone counts as destroyed.
func (d *Driver) Destroy(ctx context.Context, id string) error {
	sb, err := d.handle(ctx, id)
	if err != nil {
		if isGone(err) {
			return nil
		}
		return err
	}
	_, err = sb.Terminate(ctx, nil)
	err = mapErr("destroy", id, err)
	if err != nil && !isGone(err) {
		return err
	}
	d.forget(id)
	return nil
}
