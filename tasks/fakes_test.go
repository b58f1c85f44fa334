package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
	"github.com/airflow-sandbox/airflow-go-worker/testing/syncbuf"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/local"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/registry"
)

// fakeAirflow records what tasks push and mask.
type fakeAirflow struct {
	mu     sync.Mutex
	conns  map[string]connections.Connection
	vars   map[string]string
	xcoms  map[string]any
	masked []string
	reads  map[string]int // GetConnection calls by id
	// failMask, when set, is what MaskSecret answers.
	failMask error
}

func newFakeAirflow() *fakeAirflow {
	return &fakeAirflow{conns: map[string]connections.Connection{}, vars: map[string]string{}, xcoms: map[string]any{}, reads: map[string]int{}}
}

func (f *fakeAirflow) GetConnection(_ context.Context, id string) (connections.Connection, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads[id]++
	c, ok := f.conns[id]
	if !ok {
		return connections.Connection{}, fmt.Errorf("connection %q: %w", id, connections.ErrNotFound)
	}
	return c, nil
}

func (f *fakeAirflow) GetVariable(_ context.Context, key string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.vars[key]
	if !ok {
		return "", fmt.Errorf("variable %q not found", key)
	}
	return v, nil
}

func (f *fakeAirflow) SetXCom(_ context.Context, key string, value any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.xcoms[key] = value
	return nil
}

func (f *fakeAirflow) MaskSecret(_ context.Context, value, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failMask != nil {
		return f.failMask
	}
	f.masked = append(f.masked, value)
	return nil
}

// runStateAirflow is a fakeAirflow that also answers GetDagRunState, as
// bundles.Client does under a supervisor: from states, a run missing there
// is not found, and errs fail the call.
type runStateAirflow struct {
	*fakeAirflow
	states map[string]string
	errs   map[string]error
	asked  []string
}

func (f *runStateAirflow) GetDagRunState(_ context.Context, dagID, runID string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	run := dagID + "/" + runID
	f.asked = append(f.asked, run)
	if err := f.errs[run]; err != nil {
		return "", err
	}
	st, ok := f.states[run]
	if !ok {
		return "", fmt.Errorf("Dag run %s: dag run not found", run)
	}
	return st, nil
}

// dirDriver is the tasks' test driver: the real local backend (so its
// sandboxes are isolated and it passes the conformance suite like every
// driver) with failure injection and a record of what it was asked. Its
// sandboxes live in a temporary root; host maps a sandbox path to the host
// file behind it.
type dirDriver struct {
	*local.Driver

	mu          sync.Mutex
	failDestroy error
	failTags    error
	creates     []sandbox.Spec
	closed      int
}

var _ driver.Driver = (*dirDriver)(nil)

func newDirDriver(t *testing.T) *dirDriver { return newDirDriverOn(t, "") }

// newDirDriverOn is newDirDriver on a worker host named host ("" for this
// machine's name), with a sandbox root of its own: one host of several.
func newDirDriverOn(t *testing.T, host string) *dirDriver {
	t.Helper()
	drv, err := local.New(local.Options{Root: t.TempDir(), Host: host})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	return &dirDriver{Driver: drv}
}

// Capabilities: the test backends below claim more than the local backend
// (cpu, GPUs, allowlists) so tasks can be tested against them; the
// sandboxes run with local's isolation regardless.
func (d *dirDriver) Capabilities() sandbox.Capabilities { return fakeCapabilities }

var fakeCapabilities = sandbox.Capabilities{CPU: true, Memory: true, GPU: true, BlockNetwork: true, OpenNetwork: true,
	AllowHosts: true, AllowCIDRs: true, Tags: true, List: true, Lifetime: true}

// Create records the spec; what local cannot enforce (cpu, GPUs,
// allowlists) is left out of what it is asked, as a remote backend would
// enforce it.
func (d *dirDriver) Create(ctx context.Context, name string, spec sandbox.Spec) (sandbox.Info, error) {
	d.mu.Lock()
	d.creates = append(d.creates, spec)
	d.mu.Unlock()
	spec.CPU, spec.GPU = 0, ""
	if n := spec.Network; len(n.AllowHosts) > 0 || len(n.AllowCIDRs) > 0 {
		spec.Network = sandbox.NetworkPolicy{}
	}
	return d.Driver.Create(ctx, name, spec)
}

func (d *dirDriver) Tags(ctx context.Context, id string) (map[string]string, error) {
	if d.failTags != nil {
		return nil, d.failTags
	}
	return d.Driver.Tags(ctx, id)
}

func (d *dirDriver) Destroy(ctx context.Context, id string) error {
	d.mu.Lock()
	fail := d.failDestroy
	d.mu.Unlock()
	if fail != nil {
		return fail
	}
	return d.Driver.Destroy(ctx, id)
}

// Close counts: the tasks close their driver when they end, and the test
// goes on using it.
func (d *dirDriver) Close() error {
	d.mu.Lock()
	d.closed++
	d.mu.Unlock()
	return nil
}

// host is the host path behind sandbox path p (under its workdir or /tmp).
func (d *dirDriver) host(id, p string) string {
	info, err := d.Driver.Info(context.Background(), id)
	var work, tmp string
	if err == nil {
		work, tmp, err = d.HostDirs(id)
	}
	if err != nil {
		panic(fmt.Sprintf("host(%s, %s): %v", id, p, err))
	}
	if rel, ok := strings.CutPrefix(p, "/tmp/"); ok {
		return filepath.Join(tmp, filepath.FromSlash(rel))
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(p, info.Workdir), "/")
	return filepath.Join(work, filepath.FromSlash(rel))
}

func (d *dirDriver) alive() []string {
	list, err := d.Driver.ListSandboxes(context.Background(), nil)
	if err != nil {
		panic(err)
	}
	var ids []string
	for _, info := range list {
		ids = append(ids, info.ID)
	}
	sort.Strings(ids)
	return ids
}

// opener returns the backends a test's tasks open: local, modal and
// opensandbox, with the connection rules and capabilities of the real ones, all handing out
// d and recording each request in reqs (when not nil).
func (d *dirDriver) opener(reqs *[]BackendRequest) *registry.Registry { return backendsFor(d, reqs) }

// backendsFor is opener for any driver (a wrapper around a dirDriver).
func backendsFor(d driver.Driver, reqs *[]BackendRequest) *registry.Registry {
	r := registry.New()
	for _, b := range []registry.Registration{
		{Name: "local", Configure: fakeConfigure(d, reqs, "local", sandbox.Capabilities{Memory: true, BlockNetwork: true, OpenNetwork: true, Tags: true, List: true})},
		{Name: "modal", DefaultConnID: "modal_default", ConnOptional: true, Configure: fakeConfigure(d, reqs, "modal", fakeCapabilities)},
		{Name: "opensandbox", DefaultConnID: "opensandbox_default", Configure: fakeConfigure(d, reqs, "opensandbox",
			sandbox.Capabilities{CPU: true, Memory: true, BlockNetwork: true, OpenNetwork: true, AllowHosts: true, Tags: true, List: true, Lifetime: true})},
	} {
		r.Register(b)
	}
	return r
}

// fakeOptions is what the test backends accept as options.
type fakeOptions struct {
	Flag string `json:"flag,omitempty"`
}

func fakeConfigure(d driver.Driver, reqs *[]BackendRequest, name string, caps sandbox.Capabilities) func(json.RawMessage) (registry.Config, error) {
	return func(raw json.RawMessage) (registry.Config, error) {
		var o fakeOptions
		if err := registry.DecodeOptions(raw, &o); err != nil {
			return nil, err
		}
		return fakeBackend{d: d, reqs: reqs, name: name, caps: caps, raw: raw}, nil
	}
}

type fakeBackend struct {
	d    driver.Driver
	reqs *[]BackendRequest
	name string
	caps sandbox.Capabilities
	raw  json.RawMessage
}

func (f fakeBackend) Capabilities() sandbox.Capabilities { return f.caps }

func (f fakeBackend) Open(_ context.Context, conn *connections.Connection, _ hclog.Logger) (driver.Driver, error) {
	if f.reqs != nil {
		req := BackendRequest{Backend: f.name, Conn: conn, Options: f.raw}
		if conn != nil {
			req.ConnID = conn.ConnID
		}
		*f.reqs = append(*f.reqs, req)
	}
	return configuredDriver{f.d, f.name, f.caps}, nil
}

// configuredDriver is a test driver as the backend a fake registration
// configured: its capabilities are the registration's, by which the
// portable layer refuses a spec (gpu on the fake local, say), and its name
// the registration's, as a real backend's driver and Config declare the
// same.
type configuredDriver struct {
	driver.Driver
	name string
	caps sandbox.Capabilities
}

func (c configuredDriver) Backend() string                    { return c.name }
func (c configuredDriver) Capabilities() sandbox.Capabilities { return c.caps }

// Tags, SetTags and ListSandboxes: the test drivers all have them (they
// wrap a dirDriver), and the embedded interface does not pass them on.
func (c configuredDriver) Tags(ctx context.Context, id string) (map[string]string, error) {
	return c.Driver.(driver.Tagger).Tags(ctx, id)
}

func (c configuredDriver) SetTags(ctx context.Context, id string, tags map[string]string) error {
	return c.Driver.(driver.Tagger).SetTags(ctx, id, tags)
}

func (c configuredDriver) ListSandboxes(ctx context.Context, match map[string]string) ([]sandbox.Info, error) {
	return c.Driver.(driver.Lister).ListSandboxes(ctx, match)
}

// env is one test's world: Airflow, a driver, storage and the log.
type env struct {
	af   *fakeAirflow
	drv  *dirDriver
	st   *memStorage
	log  *syncbuf.Buffer
	reqs []BackendRequest
	deps Deps
}

func newEnv(t *testing.T) *env {
	e := &env{af: newFakeAirflow(), drv: newDirDriver(t), st: newMemStorage(), log: &syncbuf.Buffer{}}
	e.deps = Deps{
		Airflow:  e.af,
		Run:      Run{DagID: "dag_a", RunID: "manual__2026-11-29T10:00:00+00:00", TaskID: "t", MapIndex: -1},
		Logger:   hclog.New(&hclog.LoggerOptions{Output: e.log, Level: hclog.Debug}),
		Backends: e.drv.opener(&e.reqs),
		Stores:   e.st.reg,
	}
	return e
}

// wrapBackends is r with every driver it opens passed through wrap, for
// tests that watch or interrupt a real backend.
func wrapBackends(r *registry.Registry, wrap func(driver.Driver) driver.Driver) *registry.Registry {
	out := registry.New()
	for _, name := range r.Names() {
		b, _ := r.Lookup(name)
		configure := b.Configure
		b.Configure = func(raw json.RawMessage) (registry.Config, error) {
			cfg, err := configure(raw)
			if err != nil {
				return nil, err
			}
			return wrappedConfig{cfg, wrap}, nil
		}
		out.Register(b)
	}
	return out
}

type wrappedConfig struct {
	registry.Config
	wrap func(driver.Driver) driver.Driver
}

func (w wrappedConfig) Open(ctx context.Context, conn *connections.Connection, log hclog.Logger) (driver.Driver, error) {
	drv, err := w.Config.Open(ctx, conn, log)
	if err != nil {
		return nil, err
	}
	return w.wrap(drv), nil
}

// LaunchDetached and DeferralRefusal: the local driver's, which the
// embedded interface does not pass on; only the fake local backend is
// host-bound.
func (c configuredDriver) LaunchDetached(ctx context.Context, id string, req driver.ExecRequest) error {
	return c.Driver.(driver.DetachedLauncher).LaunchDetached(ctx, id, req)
}

func (c configuredDriver) DeferralRefusal() error {
	if h, ok := c.Driver.(driver.HostBound); ok && c.name == "local" {
		return h.DeferralRefusal()
	}
	return nil
}
