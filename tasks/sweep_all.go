package tasks

import (
	"context"
	"errors"
	"fmt"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/registry"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// SweepAllInput is what the maintenance Dag (airflow_go_worker_sweep)
// clears at each run: every listed backend's leftover sandboxes, then the
// storage prefixes' leftovers.
type SweepAllInput struct {
	// Backends lists each backend to sweep: backend, conn_id and
	// backend_options, as a sandbox task names them.
	Backends []BackendOptions `json:"backends,omitempty"`
	// Storage, StorageConnID and OlderThan are SweepInput's.
	Storage       []string `json:"storage,omitempty"`
	StorageConnID string   `json:"storage_conn_id,omitempty"`
	OlderThan     Duration `json:"older_than,omitempty"`
	DryRun        bool     `json:"dry_run,omitempty"`
}

// SweepAllResult is what each sweep found and removed.
type SweepAllResult struct {
	Sandboxes []SweepResult         `json:"sandboxes"`
	Storage   []storage.SweepReport `json:"storage"`
}

// SweepAll sweeps each backend in turn (Sweep: expired sandboxes and those
// whose owner run Airflow says has ended), then the storage prefixes. One
// that fails does not stop the others; the task then fails naming each.
func SweepAll(ctx context.Context, d Deps, in SweepAllInput) (SweepAllResult, error) {
	if err := in.check(); err != nil {
		return SweepAllResult{}, err
	}
	res := SweepAllResult{Sandboxes: []SweepResult{}, Storage: []storage.SweepReport{}}
	var errs []error
	for _, b := range in.Backends {
		r, err := Sweep(ctx, d, SweepInput{BackendOptions: b, DryRun: in.DryRun})
		if r.Backend == "" {
			r.Backend = b.name()
		}
		res.Sandboxes = append(res.Sandboxes, r)
		if err != nil {
			errs = append(errs, fmt.Errorf("backend %s: %w", b.name(), err))
		}
	}
	if len(in.Storage) > 0 {
		r, err := Sweep(ctx, d, SweepInput{Storage: in.Storage, StorageConnID: in.StorageConnID, OlderThan: in.OlderThan, DryRun: in.DryRun})
		res.Storage = append(res.Storage, r.Storage...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return res, errors.Join(errs...)
}

func (in SweepAllInput) check() error {
	if len(in.Backends) == 0 && len(in.Storage) == 0 {
		return final.Errorf("nothing to sweep: list backends (each {backend: ..., conn_id: ...}) or storage prefixes")
	}
	return nil
}

// Check parses each backend's options with the backends r links, so a
// config naming one this binary lacks is refused when it loads.
func (in SweepAllInput) Check(r *registry.Registry) error {
	if err := in.check(); err != nil {
		return err
	}
	for i, b := range in.Backends {
		if _, err := CheckBackendOptions(r, b); err != nil {
			return fmt.Errorf("backends[%d]: %w", i, err)
		}
	}
	return nil
}

// CheckStores checks storage.
func (in SweepAllInput) CheckStores(r *storage.Registry) error {
	return SweepInput{Storage: in.Storage}.CheckStores(r)
}
