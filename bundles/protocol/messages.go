package protocol

import (
	"bytes"
	"fmt"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Body is a message body: a struct below, whose msgpack tags are the wire's
// field names (checked against the supervisor schema the pinned task SDK
// ships, schema_test.go), or Raw. Encoding fills in its "type".
type Body interface {
	MessageType() string
	setType(string)
}

// Header is every body's type discriminator; EncodeRequest and EncodeReply
// set it from the body's MessageType, so no sender spells it.
type Header struct {
	Type string `msgpack:"type"`
}

func (h *Header) setType(t string) { h.Type = t }

// Raw is a body as a map, for what is relayed or recorded as it came (a
// supervisor's record of replies) and for tests that send what no struct
// would. Its type is its "type" key.
type Raw map[string]any

func (r Raw) MessageType() string { s, _ := r["type"].(string); return s }
func (Raw) setType(string)        {}

// Requests the runtime sends.

type GetConnection struct {
	Header
	ConnID string `msgpack:"conn_id"`
}

type GetVariable struct {
	Header
	Key string `msgpack:"key"`
}

// XComTarget names an XCom; MapIndex is left out for an unmapped task.
type XComTarget struct {
	Key      string `msgpack:"key"`
	DagID    string `msgpack:"dag_id"`
	RunID    string `msgpack:"run_id"`
	TaskID   string `msgpack:"task_id"`
	MapIndex *int   `msgpack:"map_index,omitempty"`
}

type GetXCom struct {
	Header
	XComTarget
}

type SetXCom struct {
	Header
	XComTarget
	Value any `msgpack:"value"`
	// MappedLength is the length of a list a mapped downstream task
	// expands over: the Execution API records it (a TaskMap row), and the
	// scheduler creates that many mapped task instances from it.
	MappedLength *int `msgpack:"mapped_length,omitempty"`
}

// GetXComSequenceSlice reads the XComs of every mapped instance of a task
// (ordered by map index); nil bounds take them all.
type GetXComSequenceSlice struct {
	Header
	Key               string `msgpack:"key"`
	DagID             string `msgpack:"dag_id"`
	RunID             string `msgpack:"run_id"`
	TaskID            string `msgpack:"task_id"`
	Start             *int   `msgpack:"start"`
	Stop              *int   `msgpack:"stop"`
	Step              *int   `msgpack:"step"`
	IncludePriorDates bool   `msgpack:"include_prior_dates"`
}

// SetRenderedFields records what the task resolved, for the UI's rendered
// template view (Airflow's RenderedTaskInstanceFields).
type SetRenderedFields struct {
	Header
	RenderedFields map[string]any `msgpack:"rendered_fields"`
}

// SetRenderedMapIndex names a mapped task instance in the UI.
type SetRenderedMapIndex struct {
	Header
	RenderedMapIndex string `msgpack:"rendered_map_index"`
}

// SkipDownstreamTasks has Airflow skip task instances of the current run (a
// branch's unchosen paths). Each element is a task id, or a [task id, map
// index] pair.
type SkipDownstreamTasks struct {
	Header
	Tasks []any `msgpack:"tasks"`
}

// GetAssetEventByAsset asks for the events of one asset (by name, URI or
// both), oldest first unless Ascending is false; nil bounds are unset.
type GetAssetEventByAsset struct {
	Header
	Name      *string    `msgpack:"name"`
	URI       *string    `msgpack:"uri"`
	After     *time.Time `msgpack:"after"`
	Before    *time.Time `msgpack:"before"`
	Limit     *int       `msgpack:"limit"`
	Ascending bool       `msgpack:"ascending"`
}

type MaskSecret struct {
	Header
	Value any    `msgpack:"value"`
	Name  string `msgpack:"name,omitempty"`
}

type GetDagRunState struct {
	Header
	DagID string `msgpack:"dag_id"`
	RunID string `msgpack:"run_id"`
}

// Terminal messages: the outcome of a task, the last frame it sends.

// SucceedTask carries the task's asset outlets and the events to register
// for them: the Execution API registers asset events only from these two
// lists (TaskInstance.register_asset_changes_in_db), for assets some Dag
// declares; it does not compare them with the serialized task.
type SucceedTask struct {
	Header
	EndDate          time.Time      `msgpack:"end_date"`
	TaskOutlets      []AssetProfile `msgpack:"task_outlets"`
	OutletEvents     []OutletEvent  `msgpack:"outlet_events"`
	RenderedMapIndex *string        `msgpack:"rendered_map_index,omitempty"`
}

// AssetProfile is one outlet: Type "Asset" (Name and URI), "AssetNameRef"
// (Name), "AssetUriRef" (URI) or "AssetAlias" (Name).
type AssetProfile struct {
	Name *string `msgpack:"name"`
	URI  *string `msgpack:"uri"`
	Type string  `msgpack:"type"`
}

// Asset profile types.
const (
	AssetTypeAsset   = "Asset"
	AssetTypeNameRef = "AssetNameRef"
	AssetTypeURIRef  = "AssetUriRef"
	AssetTypeAlias   = "AssetAlias"
)

// OutletEvent is one entry of SucceedTask.outlet_events, in the shape the
// Execution API reads (the schema leaves it an open object): an event for
// DestAssetKey with Extra, optionally for one partition, or, with
// SourceAliasName, an event emitted through an asset alias (DestAssetExtra
// is then the asset's own extra, for an asset Airflow creates on the fly).
type OutletEvent struct {
	DestAssetKey    AssetKey       `msgpack:"dest_asset_key"`
	Extra           map[string]any `msgpack:"extra"`
	PartitionKey    string         `msgpack:"partition_key,omitempty"`
	SourceAliasName string         `msgpack:"source_alias_name,omitempty"`
	DestAssetExtra  map[string]any `msgpack:"dest_asset_extra,omitempty"`
}

// AssetKey names an asset by name and URI: Airflow's AssetUniqueKey on the
// wire, and bundles.Asset (where either may be empty, taking the other's
// value, as Airflow's Asset does: Unique applies that).
type AssetKey struct {
	Name string `msgpack:"name"`
	URI  string `msgpack:"uri"`
}

// Unique is k with Airflow's defaults applied: an empty name or URI takes
// the other's value.
func (k AssetKey) Unique() AssetKey {
	if k.Name == "" {
		k.Name = k.URI
	}
	if k.URI == "" {
		k.URI = k.Name
	}
	return k
}

// String is the asset as a Dag author writes it.
func (k AssetKey) String() string {
	u := k.Unique()
	if u.Name == u.URI {
		return fmt.Sprintf("Asset(%q)", u.URI)
	}
	return fmt.Sprintf("Asset(name=%q, uri=%q)", u.Name, u.URI)
}

type RetryTask struct {
	Header
	EndDate          time.Time `msgpack:"end_date"`
	RetryReason      string    `msgpack:"retry_reason"`
	RenderedMapIndex *string   `msgpack:"rendered_map_index,omitempty"`
}

// TaskState ends a task failed, skipped or removed. RetryReason exists
// only from schema 2026-10-30 (Airflow 3.4); nil leaves the key out.
type TaskState struct {
	Header
	State            string    `msgpack:"state"`
	EndDate          time.Time `msgpack:"end_date"`
	RetryReason      *string   `msgpack:"retry_reason,omitempty"`
	RenderedMapIndex *string   `msgpack:"rendered_map_index,omitempty"`
}

// DeferTask ends a task deferred: the Execution API stores a trigger
// (Classpath, serde-serialized TriggerKwargs) for the triggerer and, when
// it fires, schedules the task instance again with NextMethod and
// NextKwargs (the trigger's event merged in under "event") in its
// ti_context. TriggerTimeout is an ISO 8601 duration; past it the
// scheduler resumes the task with next_method "__fail__".
type DeferTask struct {
	Header
	State            string         `msgpack:"state"`
	Classpath        string         `msgpack:"classpath"`
	TriggerKwargs    map[string]any `msgpack:"trigger_kwargs"`
	TriggerTimeout   *string        `msgpack:"trigger_timeout"`
	NextMethod       string         `msgpack:"next_method"`
	NextKwargs       map[string]any `msgpack:"next_kwargs"`
	RenderedMapIndex *string        `msgpack:"rendered_map_index,omitempty"`
}

// TaskHandlerParsingResult answers a TaskHandlerParseRequest (Gen C,
// spec 3.9): the tasks this bundle implements, by Dag.
type TaskHandlerParsingResult struct {
	Header
	Fileloc      string                   `msgpack:"fileloc"`
	TaskHandlers map[string][]TaskHandler `msgpack:"task_handlers"`
}

type TaskHandler struct {
	TaskID  string         `msgpack:"task_id"`
	Binding string         `msgpack:"binding"`
	Params  []HandlerParam `msgpack:"params"`
}

type HandlerParam struct {
	Name        string `msgpack:"name"`
	ValueSchema any    `msgpack:"value_schema"`
	ExactName   bool   `msgpack:"exact_name"`
}

// Replies and first frames the supervisor sends.

// ConnectionResult: nil pointers are null on the wire, as Airflow sends an
// unset field.
type ConnectionResult struct {
	Header
	ConnID   string  `msgpack:"conn_id"`
	ConnType string  `msgpack:"conn_type"`
	Host     *string `msgpack:"host"`
	Schema   *string `msgpack:"schema"`
	Login    *string `msgpack:"login"`
	Password *string `msgpack:"password"`
	Port     *int    `msgpack:"port"`
	Extra    *string `msgpack:"extra"`
}

type VariableResult struct {
	Header
	Key   string `msgpack:"key"`
	Value any    `msgpack:"value"`
}

type XComResult struct {
	Header
	Key   string `msgpack:"key"`
	Value any    `msgpack:"value"`
}

// XComSequenceSliceResult answers GetXComSequenceSlice.
type XComSequenceSliceResult struct {
	Header
	Root []any `msgpack:"root"`
}

type DagRunStateResult struct {
	Header
	State string `msgpack:"state"`
}

// ErrorResponse is an error reply, as the body or as the third element.
type ErrorResponse struct {
	Header
	Error  string `msgpack:"error"`
	Detail any    `msgpack:"detail"`
}

// TaskHandlerParseRequest is the Gen C Dag processor's first frame (spec
// 3.9); DagIDs, when not nil, filters the Dags to declare.
type TaskHandlerParseRequest struct {
	Header
	File       string   `msgpack:"file"`
	BundlePath string   `msgpack:"bundle_path"`
	BundleName string   `msgpack:"bundle_name"`
	DagIDs     []string `msgpack:"dag_ids,omitempty"`
}

// ArgBinding is one entry of ti_context.arg_bindings (schema 2026-10-30,
// spec 5.4): a literal the stub call passed (or its own default, with
// FromDefault) or an upstream task's return_value.
// The json tags read `airflow-go-worker run --arg-bindings`.
type ArgBinding struct {
	Name        string `msgpack:"name" json:"name"`
	Kind        string `msgpack:"kind" json:"kind"` // "literal" or "xcom"
	Value       any    `msgpack:"value,omitempty" json:"value,omitempty"`
	TaskID      string `msgpack:"task_id,omitempty" json:"task_id,omitempty"`
	FromDefault bool   `msgpack:"from_default,omitempty" json:"from_default,omitempty"`
	ValueSchema any    `msgpack:"value_schema,omitempty" json:"value_schema,omitempty"`
}

// Binding kinds.
const (
	BindLiteral = "literal"
	BindXCom    = "xcom"
)

func (*GetConnection) MessageType() string            { return TypeGetConnection }
func (*GetVariable) MessageType() string              { return TypeGetVariable }
func (*GetXCom) MessageType() string                  { return TypeGetXCom }
func (*SetXCom) MessageType() string                  { return TypeSetXCom }
func (*MaskSecret) MessageType() string               { return TypeMaskSecret }
func (*GetDagRunState) MessageType() string           { return TypeGetDagRunState }
func (*GetXComSequenceSlice) MessageType() string     { return TypeGetXComSequenceSlice }
func (*SetRenderedFields) MessageType() string        { return TypeSetRenderedFields }
func (*SetRenderedMapIndex) MessageType() string      { return TypeSetRenderedMapIndex }
func (*SkipDownstreamTasks) MessageType() string      { return TypeSkipDownstreamTasks }
func (*GetAssetEventByAsset) MessageType() string     { return TypeGetAssetEventByAsset }
func (*XComSequenceSliceResult) MessageType() string  { return TypeXComSequenceSliceResult }
func (*SucceedTask) MessageType() string              { return TypeSucceedTask }
func (*RetryTask) MessageType() string                { return TypeRetryTask }
func (*TaskState) MessageType() string                { return TypeTaskState }
func (*DeferTask) MessageType() string                { return TypeDeferTask }
func (*TaskHandlerParsingResult) MessageType() string { return TypeTaskHandlerParsingResult }
func (*ConnectionResult) MessageType() string         { return TypeConnectionResult }
func (*VariableResult) MessageType() string           { return TypeVariableResult }
func (*XComResult) MessageType() string               { return TypeXComResult }
func (*DagRunStateResult) MessageType() string        { return TypeDagRunStateResult }
func (*ErrorResponse) MessageType() string            { return TypeErrorResponse }
func (*TaskHandlerParseRequest) MessageType() string  { return TypeTaskHandlerParseRequest }
func (*startupBody) MessageType() string              { return TypeStartupDetails }

// stamp sets b's type for the wire; nil stays nil (msgpack nil).
func stamp(b Body) any {
	if b == nil {
		return nil
	}
	b.setType(b.MessageType())
	return b
}

// AsRaw is b as the map a receiver decodes it into, for records of what
// was sent (and for comparing with what Airflow sends).
func AsRaw(b Body) (Raw, error) {
	if r, ok := b.(Raw); ok || b == nil {
		return r, nil
	}
	data, err := msgpack.Marshal(stamp(b))
	if err != nil {
		return nil, err
	}
	dec := msgpack.NewDecoder(bytes.NewReader(data))
	dec.UseLooseInterfaceDecoding(true)
	var out map[string]any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}
