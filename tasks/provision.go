package tasks

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/cleanup"
	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/registry"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// ProvisionInput describes the sandbox to create.
type ProvisionInput struct {
	// BackendOptions choose the backend, its connection and its options
	// (backend_options).
	BackendOptions

	Image     string  `json:"image,omitempty"`
	CPU       float64 `json:"cpu,omitempty"`
	MemoryMiB int     `json:"memory_mib,omitempty"`
	// GPU is the GPU type and count ("A10G", "A100:2"), for backends with
	// GPUs.
	GPU string `json:"gpu,omitempty"`
	// Lifetime is the server-side lifetime ("2h" or 7200); default 1h. It must
	// cover everything up to the collect task.
	Lifetime Duration          `json:"lifetime,omitempty"`
	Workdir  string            `json:"workdir,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	// EnvFrom maps sandbox variables to connection fields or Airflow
	// variables, read at run time and registered with the secret masker.
	EnvFrom map[string]EnvSource  `json:"env_from,omitempty"`
	Network sandbox.NetworkPolicy `json:"network"`
	// Owner defaults to the Dag run, "<dag_id>/<run_id>".
	Owner string            `json:"owner,omitempty"`
	Tags  map[string]string `json:"tags,omitempty"`
	// StageIn maps sandbox paths to URLs streamed in after create. URLs may
	// use {dag_id}, {run_id}, {task_id} and {map_index}.
	StageIn map[string]string `json:"stage_in,omitempty"`
	// StorageConnID is the connection for stage_in URLs that name none: aws
	// for s3://, google_cloud_platform for gs://, wasb for abfs://.
	StorageConnID string `json:"storage_conn_id,omitempty"`
}

// Provision creates a sandbox, stages its inputs and pushes its Record under
// XCom key "sandbox". It returns the bare sandbox id, which becomes the XCom
// return_value a Python SandboxToolset(attach_to=...) reads. If anything
// fails after the sandbox exists, the sandbox is destroyed first.
func Provision(ctx context.Context, d Deps, in ProvisionInput) (string, error) {
	d, done := d.withStorage()
	defer done()
	p, err := provision(ctx, d, in)
	if err != nil {
		return "", err
	}
	defer p.backend.Close()
	rec := p.record
	if err := d.Airflow.SetXCom(ctx, RecordXComKey, rec); err != nil {
		return "", fmt.Errorf("pushing the sandbox record to XCom: %w (%s)", err, destroyQuietly(ctx, d, p.sandbox))
	}
	args := []any{"backend", rec.Backend, "id", rec.ID, "owner", rec.Owner, "expires_at", rec.ExpiresAt}
	if rec.Host != "" {
		args = append(args, "host", rec.Host) // only this host's tasks can use it
	}
	d.logger().Info("sandbox ready", args...)
	return rec.ID, nil
}

// created is the sandbox provision made, with its open backend (the
// caller closes both), the Record it pushes and the env_from values it
// holds (to redact from command output).
type created struct {
	sandbox *sandbox.Sandbox
	backend *sandbox.Backend
	record  Record
	secrets []string
}

// provision does the work shared by Provision and Convert.
func provision(ctx context.Context, d Deps, in ProvisionInput) (created, error) {
	if err := d.check(); err != nil {
		return created{}, err
	}
	log := d.logger()
	// The backend is resolved once, first: a backend this bundle does not
	// link or a misspelt option fails before any connection or secret is
	// read. The spec is refused in one place, the portable layer's Create,
	// before anything is provisioned (a bundle config's defaults were
	// refused when it loaded, by the same check: Check).
	b, err := resolveBackend(d.backends(), in.BackendOptions)
	if err != nil {
		return created{}, err
	}
	staged, err := d.Run.expandURLs("stage_in", in.StageIn)
	if err != nil {
		return created{}, err
	}
	spec, secrets, err := buildSpec(ctx, d, in)
	if err != nil {
		return created{}, err
	}
	sources, err := planStageIn(ctx, d, staged, in.StorageConnID)
	if err != nil {
		return created{}, err
	}
	backend, req, err := b.open(ctx, d)
	if err != nil {
		return created{}, err
	}
	log.Info("creating sandbox", "backend", req.Backend, "image", spec.Image, "owner", spec.Owner, "lifetime", spec.WithDefaults().Lifetime)
	sb, err := backend.Create(ctx, spec)
	if err != nil {
		backend.Close()
		return created{}, fmt.Errorf("creating a %s sandbox: %w", req.Backend, err)
	}
	fail := func(err error) (created, error) {
		what := destroyQuietly(ctx, d, sb)
		backend.Close()
		return created{}, fmt.Errorf("%w (%s)", err, what)
	}
	info, err := sb.Info(ctx)
	if err != nil {
		return fail(fmt.Errorf("describing the new sandbox: %w", err))
	}
	for _, p := range slices.Sorted(maps.Keys(sources)) {
		if err := stageIn(ctx, d, sb, p, sources[p]); err != nil {
			return fail(err)
		}
	}
	rec := Record{Backend: req.Backend, ID: sb.ID(), Name: info.Name, ConnID: req.ConnID, Workdir: info.Workdir, Owner: spec.Owner,
		Host: info.Tags[sandbox.TagHost]}
	if rec.Workdir == "" {
		rec.Workdir = spec.WithDefaults().Workdir
	}
	exp := info.ExpiresAt
	if exp.IsZero() {
		exp = sandbox.ExpiresAt(info.Tags)
	}
	if !exp.IsZero() {
		rec.ExpiresAt = exp.UTC().Format(time.RFC3339)
	}
	return created{sandbox: sb, backend: backend, record: rec, secrets: secrets}, nil
}

// Check parses the backend options with the backends r links and refuses
// what Validate refuses, what the chosen backend cannot provide (gpu on
// local, say) and what its own I/O-free rules refuse (a registry image on
// local), naming the input and the backend. The bundle config loader calls
// it with a task's defaults, so such a config is refused when packed; at
// run time the portable layer's Create refuses the values a run bound, in
// the same words (driver.CheckBackend).
func (in ProvisionInput) Check(r *registry.Registry) error {
	if err := in.Validate(); err != nil {
		return err
	}
	b, err := checkBackendOptions(r, in.BackendOptions)
	if err != nil {
		return err
	}
	return b.Check(in.checkedSpec())
}

// Validate refuses what no backend accepts (sandbox.Spec.Validate: a
// negative cpu, a lifetime over 24h, a relative workdir, ...), naming the
// inputs as a bundle config writes them. It needs no backend: the bundle
// config loader calls it when the backend is bound at run time.
func (in ProvisionInput) Validate() error {
	if err := in.checkTagsAndEnv(); err != nil {
		return err
	}
	if ps := in.checkedSpec().Problems(); len(ps) > 0 {
		return refusedSpec("%s", driver.JoinProblems(ps, nil))
	}
	return nil
}

// refusedSpec is a final refusal of a spec before anything is created, as
// driver.CheckSpec's.
func refusedSpec(format string, a ...any) error {
	return &driver.Error{Op: "sandbox spec", Kind: driver.ErrRefused, Err: fmt.Errorf(format, a...)}
}

// checkTagsAndEnv refuses tags that forge the ones provision writes and a
// variable set in both env and env_from; Validate and buildSpec both call
// it, so a bundle config's defaults are refused when it loads.
func (in ProvisionInput) checkTagsAndEnv() error {
	for _, k := range slices.Sorted(maps.Keys(in.Tags)) {
		if strings.HasPrefix(k, sandbox.ReservedTagPrefix) {
			// Later tasks, sweep and the Python provider trust these to say
			// who owns and holds the sandbox and what it holds; a tags input
			// a Dag run may set must not forge them.
			return final.Errorf("tags: %s: names starting with %s are reserved for the tags provision and the Python provider write (owner, holder, expiry, network, env_from, ...); choose another name", k, sandbox.ReservedTagPrefix)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(in.EnvFrom)) {
		if _, dup := in.Env[name]; dup {
			return final.Errorf("env_from.%s: %s is also set in env; set it in one place only", name, name)
		}
	}
	return nil
}

// checkedSpec is what Check and Validate check: the spec as far as it is
// known before env_from is read and the owner defaults to the run.
func (in ProvisionInput) checkedSpec() sandbox.Spec {
	spec := in.shape()
	spec.Owner, spec.Tags, spec.Env = in.Owner, in.Tags, in.Env
	return spec.WithDefaults()
}

// shape is the spec's resource and network part, before env and owner.
// The lifetime is rounded to seconds, which every backend counts in.
func (in ProvisionInput) shape() sandbox.Spec {
	return sandbox.Spec{
		Image: in.Image, CPU: in.CPU, MemoryMiB: in.MemoryMiB, GPU: in.GPU,
		Lifetime: time.Duration(in.Lifetime).Round(time.Second), Workdir: in.Workdir, Network: in.Network,
	}
}

// buildSpec turns the input into a sandbox spec, resolving env_from.
func buildSpec(ctx context.Context, d Deps, in ProvisionInput) (sandbox.Spec, []string, error) {
	spec := in.shape()
	spec.Owner, spec.Tags = in.Owner, in.Tags
	if spec.Owner == "" {
		spec.Owner = d.Run.Owner()
	}
	if err := in.checkTagsAndEnv(); err != nil {
		return spec, nil, err
	}
	if tag := envFromTag(in.EnvFrom); tag != "" {
		spec.Tags = withTag(spec.Tags, TagEnvFrom, tag)
	}
	var secrets []string
	fps := newEnvFingerprints()
	spec.Env = make(map[string]string, len(in.Env)+len(in.EnvFrom))
	for k, v := range in.Env {
		spec.Env[k] = v
	}
	for _, name := range slices.Sorted(maps.Keys(in.EnvFrom)) {
		v, err := resolveEnvSource(ctx, d, name, in.EnvFrom[name])
		if err != nil {
			return spec, nil, err
		}
		if err := d.Airflow.MaskSecret(ctx, v, name); err != nil {
			return spec, nil, fmt.Errorf("env_from.%s: registering the value with Airflow's secret masker failed (%v); refusing to pass an unmasked secret into the sandbox", name, err)
		}
		spec.Env[name] = v
		fps.add(name, v)
		secrets = append(secrets, v)
	}
	if len(in.EnvFrom) > 0 {
		spec.Tags = withTag(spec.Tags, TagEnvFromFingerprint, fps.tag())
	}
	if len(spec.Env) == 0 {
		spec.Env = nil
	}
	return spec, secrets, nil
}

// resolveEnvSource reads one env_from value. Errors name the variable and the
// source, never the value.
func resolveEnvSource(ctx context.Context, d Deps, name string, src EnvSource) (string, error) {
	where := "env_from." + name
	switch {
	case src.Connection != "" && src.Variable != "":
		return "", final.Errorf("%s: give either connection or variable, not both", where)
	case src.Variable != "":
		if src.Field != "" {
			return "", final.Errorf("%s: field applies to connections only; remove it", where)
		}
		v, err := d.Airflow.GetVariable(ctx, src.Variable)
		if err != nil {
			return "", fmt.Errorf("%s: reading Airflow variable %q: %w", where, src.Variable, err)
		}
		return v, nil
	case src.Connection != "":
		conn, err := d.Airflow.GetConnection(ctx, src.Connection)
		if errors.Is(err, connections.ErrNotFound) {
			return "", final.Errorf("%s: Airflow connection %q does not exist; create it or fix the connection id", where, src.Connection)
		}
		if err != nil {
			return "", fmt.Errorf("%s: reading Airflow connection %q: %w", where, src.Connection, err)
		}
		field := src.Field
		if field == "" {
			field = "password"
		}
		v, err := connectionField(conn, field)
		if err != nil {
			return "", fmt.Errorf("%s: %w", where, err)
		}
		if v == "" {
			return "", final.Errorf("%s: field %s of connection %q is empty; fill it in or map another field", where, field, src.Connection)
		}
		return v, nil
	}
	return "", final.Errorf("%s: say where the value comes from: {connection: <id>, field: password} or {variable: <key>}", where)
}

func connectionField(c connections.Connection, field string) (string, error) {
	switch field {
	case "password":
		return c.Password, nil
	case "login":
		return c.Login, nil
	case "host":
		return c.Host, nil
	case "schema":
		return c.Schema, nil
	case "port":
		if c.Port == 0 {
			return "", nil
		}
		return strconv.Itoa(c.Port), nil
	}
	key, ok := strings.CutPrefix(field, "extra.")
	if !ok || key == "" {
		return "", final.Errorf("field %q is not one of login, password, host, schema, port, extra.<key>", field)
	}
	extra, err := c.ExtraMap()
	if err != nil {
		return "", err
	}
	v, ok := extra[key]
	if !ok || v == nil {
		return "", nil
	}
	if s, ok := v.(string); ok {
		return s, nil
	}
	return fmt.Sprint(v), nil
}

// planStageIn parses stage_in's URLs (the run filled in), resolves their
// connection and checks each object is there: a missing bucket or object
// fails before a sandbox exists.
func planStageIn(ctx context.Context, d Deps, stageIn map[string]string, connID string) (map[string]storage.Location, error) {
	sources, err := parseURLs(d, "stage_in", stageIn, (*storage.Registry).Parse)
	if err != nil {
		return nil, err
	}
	if sources, err = resolveStorage(ctx, d, "storage_conn_id", connID, sources); err != nil {
		return nil, fmt.Errorf("stage_in: %w", err)
	}
	if err := checkStorage(ctx, d, "stage_in", sources, true); err != nil {
		return nil, err
	}
	return sources, nil
}

// stageIn streams one object from storage into the sandbox.
func stageIn(ctx context.Context, d Deps, sb *sandbox.Sandbox, path string, src storage.Location) error {
	log := d.logger()
	url := src.String()
	log.Info("staging in", "from", url, "to", path)
	rc, err := d.Storage.Open(ctx, src)
	if err != nil {
		return fmt.Errorf("stage_in %s: %w", path, err)
	}
	defer rc.Close()
	pr := storage.StartProgress(log, ProgressEvery, "what", url+" -> "+path)
	defer pr.Finish()
	if err := sb.WriteFile(ctx, path, pr.Reader(rc), 0o644); err != nil {
		return fmt.Errorf("stage_in %s: writing into the sandbox from %s: %w", path, url, err)
	}
	pr.Finish()
	log.Info("staged in", "to", path, "bytes", pr.Bytes())
	return nil
}

// destroyQuietly tears a sandbox down, also after the task's context was
// cancelled (within the runtime's cancel grace, see bundles/cleanup); a
// failed destroy is logged (the sandbox lifetime reclaims it), never
// returned. It returns what happened, for error messages.
func destroyQuietly(taskCtx context.Context, d Deps, sb *sandbox.Sandbox) string {
	ctx, cancel := cleanup.Context(taskCtx, cleanupTimeout)
	defer cancel()
	if err := sb.Destroy(ctx); err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, cleanup.ErrGraceOver) {
			err = cause
		}
		d.logger().Warn("could not destroy the sandbox; its lifetime will reclaim it", "id", sb.ID(), "error", err)
		return fmt.Sprintf("sandbox %s could not be destroyed (%v); its lifetime will reclaim it", sb.ID(), err)
	}
	d.logger().Info("sandbox destroyed", "id", sb.ID())
	return fmt.Sprintf("sandbox %s was destroyed", sb.ID())
}
