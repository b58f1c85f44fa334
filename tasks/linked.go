package tasks

import (
	"fmt"
	"maps"
	"slices"

	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// The CheckStores methods refuse a URL of a store r (storage.Default: the
// stores this binary links) does not hold (gs:// in a bundle built without
// the GCS driver), naming the field, as Check refuses a backend the
// registry lacks. The bundle config loader calls them with a task's
// defaults, so such a config is refused when packed, inspected or listed;
// at run time the URLs a run bound are parsed once, where they enter the
// task, and refused there before anything is provisioned.

// CheckStores checks stage_in.
func (in ProvisionInput) CheckStores(r *storage.Registry) error {
	return requireLinked(r, "stage_in", in.StageIn)
}

// CheckStores checks stage_in and exports.
func (in ConvertInput) CheckStores(r *storage.Registry) error {
	if err := in.ProvisionInput.CheckStores(r); err != nil {
		return err
	}
	return requireLinked(r, "exports", in.Exports)
}

// CheckStores checks exports.
func (in ExportInput) CheckStores(r *storage.Registry) error {
	return requireLinked(r, "exports", in.Exports)
}

// CheckStores checks prefix.
func (in ListInput) CheckStores(r *storage.Registry) error {
	if err := r.RequireLinked(in.Prefix); err != nil {
		return fmt.Errorf("prefix: %w", err)
	}
	return nil
}

// CheckStores checks storage.
func (in SweepInput) CheckStores(r *storage.Registry) error {
	for i, u := range in.Storage {
		if err := r.RequireLinked(u); err != nil {
			return fmt.Errorf("storage[%d]: %w", i, err)
		}
	}
	return nil
}

func requireLinked(r *storage.Registry, field string, urls map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(urls)) {
		if err := r.RequireLinked(urls[k]); err != nil {
			return fmt.Errorf("%s.%s: %w", field, k, err)
		}
	}
	return nil
}
