package protocol

import "time"

// Body encodes sd as the supervisor would send it: datetimes as time.Time
// (msgpack timestamps on the wire), UUIDs as strings, every required key
// present. The local supervisor and tests use it.
func (sd StartupDetails) Body() map[string]any {
	ts := func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return t
	}
	ti := map[string]any{
		"id":              sd.TI.ID,
		"task_id":         sd.TI.TaskID,
		"dag_id":          sd.TI.DagID,
		"run_id":          sd.TI.RunID,
		"try_number":      sd.TI.TryNumber,
		"dag_version_id":  sd.TI.DagVersionID,
		"map_index":       sd.TI.MapIndex,
		"hostname":        sd.TI.Hostname,
		"context_carrier": nil,
		"queue":           sd.TI.Queue,
	}
	conf := sd.DagRun.Conf
	if conf == nil {
		conf = map[string]any{}
	}
	dagRun := map[string]any{
		"dag_id":                sd.DagRun.DagID,
		"run_id":                sd.DagRun.RunID,
		"logical_date":          ts(sd.DagRun.LogicalDate),
		"data_interval_start":   ts(sd.DagRun.DataIntervalStart),
		"data_interval_end":     ts(sd.DagRun.DataIntervalEnd),
		"run_after":             ts(sd.DagRun.RunAfter),
		"start_date":            ts(sd.DagRun.StartDate),
		"end_date":              ts(sd.DagRun.EndDate),
		"clear_number":          0,
		"run_type":              sd.DagRun.RunType,
		"state":                 sd.DagRun.State,
		"conf":                  conf,
		"consumed_asset_events": []any{},
	}
	var bindings any
	if sd.ArgBindings != nil {
		list := make([]any, len(sd.ArgBindings))
		for i, b := range sd.ArgBindings {
			list[i] = b
		}
		bindings = list
	}
	return map[string]any{
		"type":         TypeStartupDetails,
		"ti":           ti,
		"dag_rel_path": sd.DagRelPath,
		"bundle_info":  map[string]any{"name": sd.BundleName, "version": nil},
		"start_date":   ts(sd.StartDate),
		"ti_context": map[string]any{
			"dag_run":               dagRun,
			"task_reschedule_count": 0,
			"max_tries":             sd.MaxTries,
			"variables":             []any{},
			"connections":           []any{},
			"should_retry":          sd.ShouldRetry,
			"arg_bindings":          bindings,
		},
		"sentry_integration": "",
	}
}
