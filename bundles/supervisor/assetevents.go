package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// The local supervisor keeps the asset events of the tasks it ran, as
// Airflow's Execution API records them from SucceedTask's outlet_events, so
// that a later task's GetAssetEventByAsset (Client.GetAssetEvents, Python's
// inlet_events) reads them: in StateDir/asset_events.json, or in memory.

// storedEvent is one recorded event, in AssetEventResponse's shape.
type storedEvent = map[string]any

func (s *Supervisor) assetEventsPath() string { return filepath.Join(s.StateDir, "asset_events.json") }

func (s *Supervisor) loadAssetEvents() ([]storedEvent, error) {
	if s.StateDir == "" {
		return slices.Clone(s.memEvents), nil
	}
	data, err := os.ReadFile(s.assetEventsPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var events []storedEvent
	if err := json.Unmarshal(data, &events); err != nil {
		return nil, fmt.Errorf("%s: %v (remove it to start over)", s.assetEventsPath(), err)
	}
	return events, nil
}

// recordAssetEvents records the outlet events a task that succeeded
// reported.
func (s *Supervisor) recordAssetEvents(ti protocol.TaskInstance, outletEvents []map[string]any) error {
	if len(outletEvents) == 0 {
		return nil
	}
	s.memMu.Lock()
	defer s.memMu.Unlock()
	events, err := s.loadAssetEvents()
	if err != nil {
		return err
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for _, oe := range outletEvents {
		key, _ := oe["dest_asset_key"].(map[string]any)
		events = append(events, storedEvent{
			"id": len(events) + 1, "timestamp": now, "extra": oe["extra"], "created_dagruns": []any{},
			"asset":         map[string]any{"name": key["name"], "uri": key["uri"], "group": "asset", "extra": map[string]any{}},
			"source_dag_id": ti.DagID, "source_run_id": ti.RunID, "source_task_id": ti.TaskID, "source_map_index": ti.MapIndex,
			"partition_key": oe["partition_key"],
		})
	}
	if s.StateDir == "" {
		s.memEvents = events
		return nil
	}
	data, err := json.Marshal(events)
	if err != nil {
		return err
	}
	return writePrivate(s.assetEventsPath(), data)
}

// assetEventsFor answers GetAssetEventByAsset: the events of the asset
// named by name and/or uri, oldest first unless ascending is false, the
// first limit of them when limit is set.
func (s *Supervisor) assetEventsFor(b map[string]any) ([]any, error) {
	s.memMu.Lock()
	events, err := s.loadAssetEvents()
	s.memMu.Unlock()
	if err != nil {
		return nil, err
	}
	name, hasName := b["name"].(string)
	uri, hasURI := b["uri"].(string)
	var out []any
	for _, e := range events {
		a, _ := e["asset"].(map[string]any)
		if hasName && a["name"] != name || hasURI && a["uri"] != uri {
			continue
		}
		out = append(out, e)
	}
	if asc, ok := b["ascending"].(bool); ok && !asc {
		slices.Reverse(out)
	}
	if n, ok := toInt(b["limit"]); ok && n >= 0 && n < len(out) {
		out = out[:n]
	}
	if out == nil {
		out = []any{}
	}
	return out, nil
}
