package tasks

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	"github.com/airflow-sandbox/airflow-go-worker/internal/randhex"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// SweepInput chooses which leftover sandboxes to remove.
type SweepInput struct {
	// BackendOptions name the backend to sweep, its connection and
	// options (for Modal, app_name in backend_options.modal says which app
	// to look in).
	BackendOptions
	// DryRun lists what would be destroyed without destroying it.
	DryRun bool `json:"dry_run,omitempty"`
	// FinishedRuns are owners ("<dag_id>/<run_id>") of Dag runs that are
	// over; their sandboxes are removed even before they expire.
	// "{dag_id}/{run_id}" is the sweep task's own run: a last task (trigger
	// rule all_done) clears what its run left behind. Under Airflow, sweep
	// also asks for the state of every other owner run it finds, so naming
	// runs is needed only outside it.
	FinishedRuns []string `json:"finished_runs,omitempty"`

	// Storage lists URL prefixes (s3://bucket/prefix, file:///dir) to clear
	// of what interrupted transfers left (temporary files, .partial
	// objects, unfinished multipart uploads) older than OlderThan (default
	// 24h). With Storage and no Backend, sweep looks at storage only.
	Storage       []string `json:"storage,omitempty"`
	StorageConnID string   `json:"storage_conn_id,omitempty"`
	OlderThan     Duration `json:"older_than,omitempty"`
}

// SweptSandbox is one leftover sandbox sweep found.
type SweptSandbox struct {
	ID        string `json:"id"`
	Name      string `json:"name,omitempty"`
	Owner     string `json:"owner,omitempty"`
	ExpiresAt string `json:"expires_at,omitempty"`
	// Reason is why it goes: ReasonExpired, ReasonRunFinished (named in
	// finished_runs) or ReasonRunEnded (Airflow says its run ended).
	Reason string `json:"reason"`
	// RunState is the owner run's state Airflow gave (success, failed)
	// when Reason is ReasonRunEnded.
	RunState string `json:"run_state,omitempty"`
	// Creator is who made it: CreatorGoWorker or CreatorPythonProvider.
	Creator string `json:"creator"`
}

// Why sweep removes a sandbox.
const (
	ReasonExpired     = "expired"
	ReasonRunFinished = "run finished"
	ReasonRunEnded    = "run ended"
)

// Who made a sandbox sweep found.
const (
	CreatorGoWorker       = "airflow-go-worker"
	CreatorPythonProvider = "common.ai provider"
)

// pythonSandboxName is the name the common.ai provider gives its sandboxes
// (sandbox/base.py _new_sandbox_name: airflow-sandbox- + 12 hex), matched
// without a regexp, which as a package variable would be compiled at every
// task start.
func pythonSandboxName(name string) bool {
	hex, ok := strings.CutPrefix(name, "airflow-sandbox-")
	return ok && randhex.Is(hex, 12, 12)
}

// creator tells whose sandbox this is from its tags, "" for neither. The
// Python provider marks none as its own, but it stamps its name in
// airflow_sandbox and always an airflow_expires_at (ModalSandboxBackend
// _create_tags), which no one else writes together.
func creator(tags map[string]string) string {
	switch {
	case tags[sandbox.TagCreatedBy] == sandbox.CreatedByValue:
		return CreatorGoWorker
	case tags[sandbox.TagCreatedBy] == "" && pythonSandboxName(tags[sandbox.TagSandbox]) && !sandbox.ExpiresAt(tags).IsZero():
		return CreatorPythonProvider
	}
	return ""
}

// SweepResult lists what sweep found and what it destroyed.
type SweepResult struct {
	Backend   string         `json:"backend"`
	DryRun    bool           `json:"dry_run"`
	Found     []SweptSandbox `json:"found"`
	Destroyed []string       `json:"destroyed"`
	// Kept counts Airflow's sandboxes that are still in use, or whose owner
	// run's state could not be learnt.
	Kept int `json:"kept"`
	// Storage reports, per prefix of SweepInput.Storage, the leftovers
	// found and removed.
	Storage []storage.SweepReport `json:"storage,omitempty"`
}

// Sweep destroys Airflow's sandboxes that have expired or whose Dag run is
// over: those this bundle created (tag airflow_created_by), and those the
// Python common.ai provider created (its airflow-sandbox-<12 hex> name and
// expiry tag), which it never sweeps itself. A run is over when
// FinishedRuns names it, or when Airflow answers GetDagRunState with
// success or failed (d.Airflow implements DagRunStates under Airflow and
// under airflow-go-worker run); a sandbox whose run is queued or running,
// or whose run's state cannot be learnt, stays until it expires. A sandbox
// with no owner (one a SandboxToolset provisioned for its own run) goes
// only once expired. Sweep never touches any other sandbox. Every removal
// is logged with its reason. A sandbox it fails to destroy makes it fail,
// after trying the rest.
func Sweep(ctx context.Context, d Deps, in SweepInput) (SweepResult, error) {
	return sweepAt(ctx, d, in, time.Now())
}

func sweepAt(ctx context.Context, d Deps, in SweepInput, now time.Time) (res SweepResult, err error) {
	if err := d.check(); err != nil {
		return SweepResult{}, err
	}
	// Bad input fails before anything is listed or removed.
	finished := map[string]bool{}
	for _, o := range in.FinishedRuns {
		o = d.Run.expand(o)
		if err := CheckFinishedRun(o); err != nil {
			return SweepResult{}, fmt.Errorf("finished_runs: %w", err)
		}
		finished[o] = true
	}
	if len(in.Storage) > 0 {
		reports, err := sweepStorage(ctx, d, in)
		if in.Backend == "" || err != nil {
			return SweepResult{DryRun: in.DryRun, Found: []SweptSandbox{}, Destroyed: []string{}, Storage: reports}, err
		}
		defer func() { res.Storage = reports }()
	}
	log := d.logger()
	backend, req, err := openBackend(ctx, d, in.BackendOptions)
	if err != nil {
		return SweepResult{}, err
	}
	defer backend.Close()
	// Unfiltered: the Python provider's sandboxes share no tag value a
	// backend could filter on. Modal lists one app (app_name), which is the
	// provider's default app too.
	list, err := backend.List(ctx, nil)
	if err != nil {
		return SweepResult{}, fmt.Errorf("listing %s sandboxes: %w", req.Backend, err)
	}
	res = SweepResult{Backend: req.Backend, DryRun: in.DryRun, Found: []SweptSandbox{}, Destroyed: []string{}}
	runs := newRunStates(d)
	waiting := unendedRuns{}
	var failed []string
	for _, info := range list {
		who := creator(info.Tags)
		if who == "" {
			continue
		}
		exp := info.ExpiresAt
		if exp.IsZero() {
			exp = sandbox.ExpiresAt(info.Tags)
		}
		owner := info.Tags[sandbox.TagOwner]
		s := SweptSandbox{ID: info.ID, Name: info.Name, Owner: owner, Creator: who}
		if !exp.IsZero() {
			s.ExpiresAt = exp.UTC().Format(time.RFC3339)
		}
		switch {
		case !exp.IsZero() && !now.Before(exp):
			s.Reason = ReasonExpired
		case owner != "" && finished[owner]:
			s.Reason = ReasonRunFinished
		case owner == "":
			log.Debug("kept: no owner run; it goes when it expires", "id", s.ID, "expires_at", s.ExpiresAt)
			res.Kept++
			continue
		default:
			state, ended := runs.ended(ctx, owner)
			if !ended {
				log.Debug("kept: its owner run has not ended", "id", s.ID, "owner", owner, "run_state", state, "expires_at", s.ExpiresAt)
				if state != "unknown" {
					waiting.add(owner, state, info.CreatedAt)
				}
				res.Kept++
				continue
			}
			s.Reason, s.RunState = ReasonRunEnded, state
		}
		res.Found = append(res.Found, s)
		if in.DryRun {
			log.Info("would destroy", "id", s.ID, "owner", s.Owner, "creator", s.Creator, "reason", s.Reason, "run_state", s.RunState, "expires_at", s.ExpiresAt)
			continue
		}
		if err := backend.Open(info.ID).Destroy(ctx); err != nil {
			log.Error("could not destroy", "id", s.ID, "error", err)
			failed = append(failed, fmt.Sprintf("%s (%v)", s.ID, err))
			continue
		}
		log.Info("destroyed", "id", s.ID, "owner", s.Owner, "creator", s.Creator, "reason", s.Reason, "run_state", s.RunState, "expires_at", s.ExpiresAt)
		res.Destroyed = append(res.Destroyed, s.ID)
	}
	waiting.report(log, now)
	log.Info("sweep done", "backend", req.Backend, "stale", len(res.Found), "destroyed", len(res.Destroyed), "kept", res.Kept, "dry_run", in.DryRun)
	if len(failed) > 0 {
		return res, fmt.Errorf("sweep could not destroy %d sandbox(es): %s; run it again, or remove them in the %s console",
			len(failed), strings.Join(failed, "; "), req.Backend)
	}
	return res, nil
}

// unendedRuns are the owner runs, queued or running by Airflow's answer,
// whose sandboxes a sweep kept: their state and their oldest sandbox's
// creation time (zero when the backend does not say).
type unendedRuns map[string]*unendedRun

type unendedRun struct {
	state     string
	sandboxes int
	oldest    time.Time
}

func (u unendedRuns) add(owner, state string, created time.Time) {
	r := u[owner]
	if r == nil {
		r = &unendedRun{state: state}
		u[owner] = r
	}
	r.sandboxes++
	if !created.IsZero() && (r.oldest.IsZero() || created.Before(r.oldest)) {
		r.oldest = created
	}
}

// report names each run whose sandboxes were kept, and why a run can stay
// unended: a task taken by a worker that died before starting it stays
// queued (the run stays running), and nothing in the task log says so.
func (u unendedRuns) report(log hclog.Logger, now time.Time) {
	if len(u) == 0 {
		return
	}
	owners := make([]string, 0, len(u))
	for o := range u {
		owners = append(owners, o)
	}
	sort.Strings(owners)
	for _, o := range owners {
		r := u[o]
		args := []any{"owner", o, "run_state", r.state, "sandboxes", r.sandboxes}
		if !r.oldest.IsZero() {
			args = append(args, "oldest_made", now.Sub(r.oldest).Round(time.Second).String()+" ago")
		}
		log.Info("kept: the sandboxes of a run that has not ended", args...)
	}
	log.Info("these runs have not ended, so their sandboxes stay. A run that stays running with no task running has a task stuck queued: "+
		"a worker that died after taking it never started it, and only the scheduler's or worker's log says so. Airflow requeues such a task "+
		"after [scheduler] task_queued_timeout (600 s by default), twice, then fails it; clear the task or mark it failed to end the run sooner. "+
		"The sandboxes go at the first sweep after the run ends", "runs", len(u))
}

// CheckFinishedRun fails unless run names a Dag run as <dag_id>/<run_id>.
func CheckFinishedRun(run string) error {
	if dag, id, ok := strings.Cut(run, "/"); !ok || dag == "" || id == "" {
		return final.Errorf("%q is not of the form <dag_id>/<run_id>", run)
	}
	return nil
}

// DagRunStates tells sweep whether a sandbox's owner run has ended.
// bundles.Client implements it (GetDagRunState, which Airflow's supervisor
// relays to the Execution API); an Airflow without it (the sweep command)
// leaves runs not named in finished_runs alone.
type DagRunStates interface {
	GetDagRunState(ctx context.Context, dagID, runID string) (string, error)
}

// runStates asks Airflow about each owner run once per sweep.
type runStates struct {
	ask   DagRunStates // nil outside Airflow
	log   hclog.Logger
	cache map[string]runAnswer
}

type runAnswer struct {
	state string
	ended bool
}

func newRunStates(d Deps) *runStates {
	ask, _ := d.Airflow.(DagRunStates)
	if ask == nil {
		d.logger().Info("the state of owner runs cannot be learnt here (no Airflow supervisor); sandboxes go when they expire or when finished_runs names their run")
	}
	return &runStates{ask: ask, log: d.logger(), cache: map[string]runAnswer{}}
}

// ended reports whether Airflow says the owner run is over (success or
// failed). Anything else keeps the sandbox: a run that is queued or
// running, an owner that names no run, a run Airflow does not know (it may
// belong to another Airflow sharing the backend), an error.
func (r *runStates) ended(ctx context.Context, owner string) (state string, ended bool) {
	if a, ok := r.cache[owner]; ok {
		return a.state, a.ended
	}
	a := runAnswer{state: "unknown"}
	dag, run, ok := strings.Cut(owner, "/")
	switch {
	case r.ask == nil:
	case !ok || dag == "" || run == "":
		r.log.Warn("kept: the owner tag names no Dag run (<dag_id>/<run_id>); its sandboxes go when they expire", "owner", owner)
	default:
		st, err := r.ask.GetDagRunState(ctx, dag, run)
		if err != nil {
			r.log.Warn("kept: could not learn the state of the owner run; its sandboxes go when they expire", "owner", owner, "error", err)
			break
		}
		a = runAnswer{state: st, ended: st == "success" || st == "failed"}
	}
	r.cache[owner] = a
	return a.state, a.ended
}
