package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Message type discriminators this runtime reads or writes.
const (
	TypeStartupDetails           = "StartupDetails"
	TypeTaskHandlerParseRequest  = "TaskHandlerParseRequest"
	TypeTaskHandlerParsingResult = "TaskHandlerParsingResult"
	TypeSucceedTask              = "SucceedTask"
	TypeRetryTask                = "RetryTask"
	TypeTaskState                = "TaskState"
	TypeDeferTask                = "DeferTask"
	TypeGetConnection            = "GetConnection"
	TypeConnectionResult         = "ConnectionResult"
	TypeGetVariable              = "GetVariable"
	TypeVariableResult           = "VariableResult"
	TypeGetXCom                  = "GetXCom"
	TypeXComResult               = "XComResult"
	TypeSetXCom                  = "SetXCom"
	TypeMaskSecret               = "MaskSecret"
	TypeGetDagRunState           = "GetDagRunState"
	TypeDagRunStateResult        = "DagRunStateResult"
	TypeErrorResponse            = "ErrorResponse"
	TypeGetXComSequenceSlice     = "GetXComSequenceSlice"
	TypeXComSequenceSliceResult  = "XComSequenceSliceResult"
	TypeSetRenderedFields        = "SetRenderedFields"
	TypeSetRenderedMapIndex      = "SetRenderedMapIndex"
	TypeSkipDownstreamTasks      = "SkipDownstreamTasks"
	TypeGetAssetEventByAsset     = "GetAssetEventByAsset"
	TypeAssetEventsResult        = "AssetEventsResult"
	TypeOKResponse               = "OKResponse"
)

// TaskInstance is the running task instance: StartupDetails.ti, plus
// ti_context.max_tries. It is the one type from the frame to the task
// function (bundles.TaskInstance is this type).
type TaskInstance struct {
	ID           string
	DagID        string
	TaskID       string
	RunID        string
	TryNumber    int
	MapIndex     int // -1 when the task is not mapped
	DagVersionID string
	// Hostname is the host running the task (the runtime fills in its own
	// when Airflow sends null, as Airflow's Python task runner does).
	Hostname string
	Queue    string
	MaxTries int // ti_context.max_tries
	// Resumed is the state the task deferred with (bundles.Defer), as
	// JSON, when this run resumes it; "" on a first run. Deferrals counts
	// the deferrals of this try so far.
	Resumed   string
	Deferrals int
}

// DagRun is the Dag run the task belongs to: StartupDetails.ti_context.dag_run.
// Zero times mean Airflow sent null. bundles.DagRun is this type.
type DagRun struct {
	DagID             string
	RunID             string
	RunType           string
	State             string
	LogicalDate       time.Time
	DataIntervalStart time.Time
	DataIntervalEnd   time.Time
	RunAfter          time.Time
	StartDate         time.Time
	EndDate           time.Time
	Conf              map[string]any
	// TriggeringAssetEvents are the asset events that triggered an
	// asset-triggered run (consumed_asset_events), oldest first; empty for
	// other runs.
	TriggeringAssetEvents []AssetEvent
	// PartitionKey is the run's partition key (partitioned assets), or "".
	PartitionKey string
}

// AssetEvent is one asset event that triggered the run (one of
// ti_context.dag_run.consumed_asset_events). bundles.AssetEvent is this
// type.
type AssetEvent struct {
	Asset          AssetKey       // the asset the event is for
	AssetExtra     map[string]any // the asset's own extra
	Extra          map[string]any // the event's extra (what its producer set)
	SourceDagID    string
	SourceRunID    string
	SourceTaskID   string
	SourceMapIndex int // -1 when unmapped or unknown
	SourceAliases  []string
	Timestamp      time.Time
	PartitionKey   string
}

// StartupDetails is the first frame of a task run, decoded tolerantly:
// unknown keys are ignored, datetimes may be msgpack timestamps or RFC 3339
// strings, and absent optional keys take Airflow's defaults.
type StartupDetails struct {
	TI          TaskInstance
	DagRelPath  string
	BundleName  string
	StartDate   time.Time
	DagRun      DagRun
	ShouldRetry bool
	// ArgBindings is ti_context.arg_bindings (nil for older schemas).
	ArgBindings []ArgBinding
	// NextMethod and NextKwargs are ti_context's on a resumed task
	// instance (after DeferTask): the method the task deferred to and its
	// serde-serialized kwargs, the trigger's event merged in. Empty on a
	// first run.
	NextMethod string
	NextKwargs map[string]any
	// TIStartDate is ti_context.start_date, which the Execution API sends
	// on a resume: the task instance's first start, kept across
	// deferrals (zero when absent).
	TIStartDate time.Time
}

// ParseStartupDetails validates and decodes a StartupDetails body. It fails
// when a required task-instance field is missing or a known field has the
// wrong type, naming the field.
func ParseStartupDetails(body map[string]any) (StartupDetails, error) {
	var sd StartupDetails
	if err := checkCuts(body, "StartupDetails", cutsAllowed); err != nil {
		return sd, err
	}
	f := fields{prefix: "StartupDetails"}
	ti := f.mapField(body, "ti", true)
	if f.err != nil {
		return sd, f.err
	}
	tf := fields{prefix: "StartupDetails.ti"}
	sd.TI = TaskInstance{
		ID:           tf.str(ti, "id", true),
		DagID:        tf.str(ti, "dag_id", true),
		TaskID:       tf.str(ti, "task_id", true),
		RunID:        tf.str(ti, "run_id", true),
		TryNumber:    tf.int(ti, "try_number", true, 0),
		MapIndex:     tf.int(ti, "map_index", false, -1),
		DagVersionID: tf.str(ti, "dag_version_id", false),
		Hostname:     tf.str(ti, "hostname", false),
		Queue:        tf.str(ti, "queue", false),
	}
	if tf.err != nil {
		return sd, tf.err
	}
	if sd.TI.TryNumber < 1 {
		return sd, fmt.Errorf("StartupDetails.ti.try_number must be at least 1, got %d", sd.TI.TryNumber)
	}
	if sd.TI.Queue == "" {
		sd.TI.Queue = "default"
	}
	sd.DagRelPath = f.str(body, "dag_rel_path", false)
	sd.StartDate = f.time(body, "start_date")
	if bi := f.mapField(body, "bundle_info", false); bi != nil {
		sd.BundleName = f.str(bi, "name", false)
	}
	ctx := f.mapField(body, "ti_context", false)
	if f.err != nil {
		return sd, f.err
	}
	cf := fields{prefix: "StartupDetails.ti_context"}
	sd.TI.MaxTries = cf.int(ctx, "max_tries", false, 0)
	sd.ShouldRetry = cf.bool(ctx, "should_retry")
	sd.NextMethod = cf.str(ctx, "next_method", false)
	sd.NextKwargs = nextKwargs(&cf, ctx)
	sd.TIStartDate = cf.time(ctx, "start_date")
	if dr := cf.mapField(ctx, "dag_run", false); dr != nil {
		df := fields{prefix: "StartupDetails.ti_context.dag_run"}
		sd.DagRun = DagRun{
			DagID:             df.str(dr, "dag_id", false),
			RunID:             df.str(dr, "run_id", false),
			RunType:           df.str(dr, "run_type", false),
			State:             df.str(dr, "state", false),
			LogicalDate:       df.time(dr, "logical_date"),
			DataIntervalStart: df.time(dr, "data_interval_start"),
			DataIntervalEnd:   df.time(dr, "data_interval_end"),
			RunAfter:          df.time(dr, "run_after"),
			StartDate:         df.time(dr, "start_date"),
			EndDate:           df.time(dr, "end_date"),
			Conf:              df.mapField(dr, "conf", false),
			PartitionKey:      df.str(dr, "partition_key", false),
		}
		if df.err != nil {
			return sd, df.err
		}
		events, err := assetEvents(dr["consumed_asset_events"])
		if err != nil {
			return sd, err
		}
		sd.DagRun.TriggeringAssetEvents = events
	}
	if v, ok := ctx["arg_bindings"]; ok && v != nil {
		list, ok := v.([]any)
		if !ok {
			return sd, fmt.Errorf("StartupDetails.ti_context.arg_bindings must be a list, got %s", typeName(v))
		}
		for i, item := range list {
			m, ok := item.(map[string]any)
			if !ok {
				return sd, fmt.Errorf("StartupDetails.ti_context.arg_bindings[%d] must be a map, got %s", i, typeName(item))
			}
			sd.ArgBindings = append(sd.ArgBindings, argBinding(m))
		}
	}
	if sd.DagRun.DagID == "" {
		sd.DagRun.DagID = sd.TI.DagID
	}
	if sd.DagRun.RunID == "" {
		sd.DagRun.RunID = sd.TI.RunID
	}
	if cf.err != nil {
		return sd, cf.err
	}
	return sd, f.err
}

// nextKwargs reads ti_context.next_kwargs: a map, or the same as a JSON
// string (the Execution API's model allows both).
func nextKwargs(f *fields, ctx map[string]any) map[string]any {
	v, ok := ctx["next_kwargs"]
	if !ok || v == nil {
		return nil
	}
	if s, ok := v.(string); ok {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			f.fail("next_kwargs", "is a string that is not a JSON object: %v", err)
		}
		return m
	}
	return f.mapField(ctx, "next_kwargs", false)
}

// assetEvents reads consumed_asset_events, oldest first, naming the entry
// and field at fault.
func assetEvents(v any) ([]AssetEvent, error) {
	return ParseAssetEvents(v, "StartupDetails.ti_context.dag_run.consumed_asset_events")
}

// ParseAssetEvents reads a list of asset events (consumed_asset_events, or
// AssetEventsResult.asset_events), oldest first; errors name the entry and
// field at fault under at.
func ParseAssetEvents(v any, at string) ([]AssetEvent, error) {
	if v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s must be a list, got %s", at, typeName(v))
	}
	out := make([]AssetEvent, 0, len(list))
	for i, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s[%d] must be a map, got %s", at, i, typeName(item))
		}
		f := fields{prefix: fmt.Sprintf("%s[%d]", at, i)}
		asset := f.mapField(m, "asset", true)
		af := fields{prefix: f.prefix + ".asset"}
		e := AssetEvent{
			Asset:          AssetKey{Name: af.str(asset, "name", false), URI: af.str(asset, "uri", false)},
			AssetExtra:     af.mapField(asset, "extra", false),
			Extra:          f.mapField(m, "extra", false),
			SourceDagID:    f.str(m, "source_dag_id", false),
			SourceRunID:    f.str(m, "source_run_id", false),
			SourceTaskID:   f.str(m, "source_task_id", false),
			SourceMapIndex: f.int(m, "source_map_index", false, -1),
			Timestamp:      f.time(m, "timestamp"),
			PartitionKey:   f.str(m, "partition_key", false),
		}
		if aliases, ok := m["source_aliases"].([]any); ok {
			for _, a := range aliases {
				if am, ok := a.(map[string]any); ok {
					if n, ok := am["name"].(string); ok {
						e.SourceAliases = append(e.SourceAliases, n)
					}
				}
			}
		}
		if f.err != nil {
			return nil, f.err
		}
		if af.err != nil {
			return nil, af.err
		}
		out = append(out, e)
	}
	// Oldest first, whatever order Airflow sent them in: a binding's
	// "latest" is the last.
	slices.SortStableFunc(out, func(a, b AssetEvent) int { return a.Timestamp.Compare(b.Timestamp) })
	return out, nil
}

// argBinding reads one arg_bindings entry leniently: a field of the wrong
// type reads as its zero value, so the runtime's binding, not the frame,
// fails and says which argument is wrong (a binding error fails the task;
// a malformed frame would end it without an outcome).
func argBinding(m map[string]any) ArgBinding {
	str := func(k string) string { s, _ := m[k].(string); return s }
	fromDefault, _ := m["from_default"].(bool)
	return ArgBinding{Name: str("name"), Kind: str("kind"), Value: m["value"], TaskID: str("task_id"), FromDefault: fromDefault, ValueSchema: m["value_schema"]}
}

// ParseTaskHandlerParseRequest decodes a TaskHandlerParseRequest body.
func ParseTaskHandlerParseRequest(body map[string]any) (TaskHandlerParseRequest, error) {
	if err := checkCuts(body, "TaskHandlerParseRequest", nil); err != nil {
		return TaskHandlerParseRequest{}, err
	}
	f := fields{prefix: "TaskHandlerParseRequest"}
	r := TaskHandlerParseRequest{
		File:       f.str(body, "file", false),
		BundlePath: f.str(body, "bundle_path", false),
		BundleName: f.str(body, "bundle_name", false),
	}
	if v, ok := body["dag_ids"]; ok && v != nil {
		list, ok := v.([]any)
		if !ok {
			return r, fmt.Errorf("TaskHandlerParseRequest.dag_ids must be a list of strings, got %s", typeName(v))
		}
		r.DagIDs = []string{}
		for _, item := range list {
			s, ok := item.(string)
			if !ok {
				return r, fmt.Errorf("TaskHandlerParseRequest.dag_ids must be a list of strings, found %s", typeName(item))
			}
			r.DagIDs = append(r.DagIDs, s)
		}
	}
	return r, f.err
}

// fields reads typed values out of decoded maps, keeping the first error so
// decoding code stays linear.
type fields struct {
	prefix string
	err    error
}

func (f *fields) fail(key, format string, args ...any) {
	if f.err == nil {
		f.err = fmt.Errorf("%s.%s %s", f.prefix, key, fmt.Sprintf(format, args...))
	}
}

func (f *fields) str(m map[string]any, key string, required bool) string {
	v, ok := m[key]
	if !ok || v == nil {
		if required {
			f.fail(key, "is required but missing")
		}
		return ""
	}
	switch s := v.(type) {
	case string:
		if required && s == "" {
			f.fail(key, "is required but empty")
		}
		return s
	case []byte: // some encoders send UUIDs as 16 raw bytes
		if len(s) == 16 {
			return fmt.Sprintf("%x-%x-%x-%x-%x", s[0:4], s[4:6], s[6:8], s[8:10], s[10:16])
		}
		return string(s)
	}
	f.fail(key, "must be a string, got %s", typeName(v))
	return ""
}

func (f *fields) int(m map[string]any, key string, required bool, def int) int {
	v, ok := m[key]
	if !ok || v == nil {
		if required {
			f.fail(key, "is required but missing")
		}
		return def
	}
	n, ok := asInt(v)
	if !ok || n > 1<<31 || n < -(1<<31) {
		f.fail(key, "must be an integer, got %s", typeName(v))
		return def
	}
	return int(n)
}

func (f *fields) bool(m map[string]any, key string) bool {
	v, ok := m[key]
	if !ok || v == nil {
		return false
	}
	b, ok := v.(bool)
	if !ok {
		f.fail(key, "must be a bool, got %s", typeName(v))
	}
	return b
}

func (f *fields) mapField(m map[string]any, key string, required bool) map[string]any {
	v, ok := m[key]
	if !ok || v == nil {
		if required {
			f.fail(key, "is required but missing")
		}
		return nil
	}
	mm, ok := v.(map[string]any)
	if !ok {
		f.fail(key, "must be a map, got %s", typeName(v))
	}
	return mm
}

func (f *fields) time(m map[string]any, key string) time.Time {
	v, ok := m[key]
	if !ok || v == nil {
		return time.Time{}
	}
	t, err := ParseTime(v)
	if err != nil {
		f.fail(key, "%v", err)
	}
	return t
}

// ParseTime accepts a msgpack timestamp (decoded as time.Time) or an
// RFC 3339 / Python isoformat string (a naive one is taken as UTC).
func ParseTime(v any) (time.Time, error) {
	switch t := v.(type) {
	case time.Time:
		return t.UTC(), nil
	case string:
		s := strings.TrimSpace(t)
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999"} {
			if p, err := time.Parse(layout, s); err == nil {
				return p.UTC(), nil
			}
		}
		return time.Time{}, fmt.Errorf("is not an RFC 3339 datetime: %q", t)
	}
	return time.Time{}, errors.New("must be a datetime (msgpack timestamp or RFC 3339 string), got " + typeName(v))
}
