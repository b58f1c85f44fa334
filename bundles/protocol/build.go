package protocol

import "time"

// The StartupDetails body on the wire, as Airflow's supervisor sends it.
type (
	startupBody struct {
		Header
		TI                tiBody         `msgpack:"ti"`
		DagRelPath        string         `msgpack:"dag_rel_path"`
		BundleInfo        bundleInfoBody `msgpack:"bundle_info"`
		StartDate         time.Time      `msgpack:"start_date"`
		TIContext         tiContextBody  `msgpack:"ti_context"`
		SentryIntegration string         `msgpack:"sentry_integration"`
	}
	tiBody struct {
		ID             string `msgpack:"id"`
		TaskID         string `msgpack:"task_id"`
		DagID          string `msgpack:"dag_id"`
		RunID          string `msgpack:"run_id"`
		TryNumber      int    `msgpack:"try_number"`
		DagVersionID   string `msgpack:"dag_version_id"`
		MapIndex       int    `msgpack:"map_index"`
		Hostname       any    `msgpack:"hostname"` // null: the scheduler sends none
		ContextCarrier any    `msgpack:"context_carrier"`
		Queue          string `msgpack:"queue"`
	}
	bundleInfoBody struct {
		Name    string  `msgpack:"name"`
		Version *string `msgpack:"version"`
	}
	tiContextBody struct {
		DagRun              dagRunBody `msgpack:"dag_run"`
		TaskRescheduleCount int        `msgpack:"task_reschedule_count"`
		MaxTries            int        `msgpack:"max_tries"`
		Variables           []any      `msgpack:"variables"`
		Connections         []any      `msgpack:"connections"`
		NextMethod          *string    `msgpack:"next_method"`
		NextKwargs          any        `msgpack:"next_kwargs"`
		XComKeysToClear     []any      `msgpack:"xcom_keys_to_clear"`
		ShouldRetry         bool       `msgpack:"should_retry"`
		StartDate           *time.Time `msgpack:"start_date"`
		// ArgBindings exists from schema 2026-10-30: nil leaves the key
		// out, a pointer to no bindings sends null.
		ArgBindings *[]ArgBinding `msgpack:"arg_bindings,omitempty"`
	}
	dagRunBody struct {
		DagID               string           `msgpack:"dag_id"`
		RunID               string           `msgpack:"run_id"`
		LogicalDate         *time.Time       `msgpack:"logical_date"`
		DataIntervalStart   *time.Time       `msgpack:"data_interval_start"`
		DataIntervalEnd     *time.Time       `msgpack:"data_interval_end"`
		RunAfter            time.Time        `msgpack:"run_after"`
		StartDate           *time.Time       `msgpack:"start_date"`
		EndDate             *time.Time       `msgpack:"end_date"`
		ClearNumber         int              `msgpack:"clear_number"`
		RunType             string           `msgpack:"run_type"`
		State               string           `msgpack:"state"`
		Conf                map[string]any   `msgpack:"conf"`
		TriggeringUserName  *string          `msgpack:"triggering_user_name"`
		ConsumedAssetEvents []assetEventBody `msgpack:"consumed_asset_events"`
		PartitionKey        *string          `msgpack:"partition_key"`
		PartitionDate       *string          `msgpack:"partition_date"`
		Note                *string          `msgpack:"note"`
		TeamName            *string          `msgpack:"team_name"`
	}
	assetEventBody struct {
		Asset          assetRefBody   `msgpack:"asset"`
		Extra          map[string]any `msgpack:"extra"`
		SourceTaskID   *string        `msgpack:"source_task_id"`
		SourceDagID    *string        `msgpack:"source_dag_id"`
		SourceRunID    *string        `msgpack:"source_run_id"`
		SourceMapIndex *int           `msgpack:"source_map_index"`
		SourceAliases  []aliasRefBody `msgpack:"source_aliases"`
		Timestamp      time.Time      `msgpack:"timestamp"`
		PartitionKey   *string        `msgpack:"partition_key"`
	}
	assetRefBody struct {
		Name  string         `msgpack:"name"`
		URI   string         `msgpack:"uri"`
		Extra map[string]any `msgpack:"extra"`
	}
	aliasRefBody struct {
		Name string `msgpack:"name"`
	}
)

// body is e as Airflow's supervisor sends it.
func (e AssetEvent) body() assetEventBody {
	str := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	orEmpty := func(m map[string]any) map[string]any {
		if m == nil {
			return map[string]any{}
		}
		return m
	}
	b := assetEventBody{
		Asset:        assetRefBody{Name: e.Asset.Name, URI: e.Asset.URI, Extra: orEmpty(e.AssetExtra)},
		Extra:        orEmpty(e.Extra),
		SourceTaskID: str(e.SourceTaskID), SourceDagID: str(e.SourceDagID), SourceRunID: str(e.SourceRunID),
		SourceAliases: []aliasRefBody{}, Timestamp: e.Timestamp, PartitionKey: str(e.PartitionKey),
	}
	if e.SourceMapIndex >= 0 || e.SourceTaskID != "" {
		mi := e.SourceMapIndex
		b.SourceMapIndex = &mi
	}
	for _, a := range e.SourceAliases {
		b.SourceAliases = append(b.SourceAliases, aliasRefBody{Name: a})
	}
	return b
}

// Body encodes sd as the supervisor would send it: datetimes as time.Time
// (msgpack timestamps on the wire; zero ones null where the schema allows
// null), UUIDs as strings, every key Airflow's
// own StartupDetails carries present (checked against Airflow 3.3.2 by
// e2e/realsdk), and arg_bindings when withArgBindings (schema 2026-10-30
// only; see supervisor.StartupBody). The local supervisor and tests use it.
func (sd StartupDetails) Body(withArgBindings bool) Body {
	ts := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	conf := sd.DagRun.Conf
	if conf == nil {
		conf = map[string]any{}
	}
	body := &startupBody{
		TI: tiBody{
			ID: sd.TI.ID, TaskID: sd.TI.TaskID, DagID: sd.TI.DagID, RunID: sd.TI.RunID, TryNumber: sd.TI.TryNumber,
			DagVersionID: sd.TI.DagVersionID, MapIndex: sd.TI.MapIndex, Queue: sd.TI.Queue,
		},
		DagRelPath: sd.DagRelPath,
		BundleInfo: bundleInfoBody{Name: sd.BundleName},
		StartDate:  sd.StartDate,
		TIContext: tiContextBody{
			DagRun: dagRunBody{
				DagID: sd.DagRun.DagID, RunID: sd.DagRun.RunID,
				LogicalDate: ts(sd.DagRun.LogicalDate), DataIntervalStart: ts(sd.DagRun.DataIntervalStart),
				DataIntervalEnd: ts(sd.DagRun.DataIntervalEnd), RunAfter: sd.DagRun.RunAfter,
				StartDate: ts(sd.DagRun.StartDate), EndDate: ts(sd.DagRun.EndDate),
				RunType: sd.DagRun.RunType, State: sd.DagRun.State, Conf: conf, ConsumedAssetEvents: []assetEventBody{},
			},
			MaxTries: sd.TI.MaxTries, Variables: []any{}, Connections: []any{}, XComKeysToClear: []any{},
			ShouldRetry: sd.ShouldRetry, StartDate: ts(sd.StartDate),
		},
	}
	for _, e := range sd.DagRun.TriggeringAssetEvents {
		body.TIContext.DagRun.ConsumedAssetEvents = append(body.TIContext.DagRun.ConsumedAssetEvents, e.body())
	}
	if sd.DagRun.PartitionKey != "" {
		pk := sd.DagRun.PartitionKey
		body.TIContext.DagRun.PartitionKey = &pk
	}
	if sd.TI.Hostname != "" {
		body.TI.Hostname = sd.TI.Hostname
	}
	if sd.NextMethod != "" {
		m := sd.NextMethod
		body.TIContext.NextMethod, body.TIContext.NextKwargs = &m, sd.NextKwargs
		body.TIContext.StartDate = ts(sd.TIStartDate)
	}
	if withArgBindings {
		bindings := sd.ArgBindings
		body.TIContext.ArgBindings = &bindings
	}
	return body
}
