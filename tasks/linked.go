package tasks

import (
	"fmt"
	"maps"
	"slices"

	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// The CheckStores methods refuse a URL of a store this binary does not link
// (gs:// in a bundle built without the GCS driver), naming the field. The
// bundle config loader calls them with a task's defaults, so such a config
// is refused when packed, inspected or listed; at run time resolveStorage
// refuses the URLs a run bound before anything is provisioned.

// CheckStores checks stage_in.
func (in ProvisionInput) CheckStores() error { return requireLinked("stage_in", in.StageIn) }

// CheckStores checks stage_in and exports.
func (in ConvertInput) CheckStores() error {
	if err := in.ProvisionInput.CheckStores(); err != nil {
		return err
	}
	return requireLinked("exports", in.Exports)
}

// CheckStores checks exports.
func (in ExportInput) CheckStores() error { return requireLinked("exports", in.Exports) }

// CheckStores checks storage.
func (in SweepInput) CheckStores() error {
	for i, u := range in.Storage {
		if err := storage.RequireLinked(u); err != nil {
			return fmt.Errorf("storage[%d]: %w", i, err)
		}
	}
	return nil
}

func requireLinked(field string, urls map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(urls)) {
		if err := storage.RequireLinked(urls[k]); err != nil {
			return fmt.Errorf("%s.%s: %w", field, k, err)
		}
	}
	return nil
}
