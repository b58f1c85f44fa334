package protocol

import "time"

// Body encodes sd as the supervisor would send it: datetimes as time.Time
// (msgpack timestamps on the wire), UUIDs as strings, every key Airflow's
// own StartupDetails carries present (checked against Airflow 3.3.2 by
// e2e/realsdk), plus arg_bindings, which only 2026-10-30 has (drop it for
// older schemas, see supervisor.StartupBody). The local supervisor and
// tests use it.
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
		"triggering_user_name":  nil,
		"consumed_asset_events": []any{},
		"partition_key":         nil,
		"partition_date":        nil,
		"note":                  nil,
		"team_name":             nil,
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
			"next_method":           nil,
			"next_kwargs":           nil,
			"xcom_keys_to_clear":    []any{},
			"should_retry":          sd.ShouldRetry,
			"start_date":            ts(sd.StartDate),
			"arg_bindings":          bindings,
		},
		"sentry_integration": "",
	}
}
