package supervisor

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/schema"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// airflowRequestTypes are the request types Airflow 3.3's supervisor
// decodes: the members of its ToSupervisor union in apache-airflow-task-sdk
// 1.3.2 (e2e/realsdk checks this list against the installed package). A
// body of any other type fails validation there: the supervisor logs it and
// sends no reply, so the task waits until it is killed.
var airflowRequestTypes = map[string]bool{}

func init() {
	for _, t := range strings.Fields(`AwaitInputTask ClearAssetStateStoreByName ClearAssetStateStoreByUri
		ClearTaskStateStore CreateHITLDetailPayload DeferTask DeleteAssetStateStoreByName
		DeleteAssetStateStoreByUri DeleteTaskStateStore DeleteVariable DeleteXCom GetAssetByName
		GetAssetByUri GetAssetEventByAsset GetAssetEventByAssetAlias GetAssetStateStoreByName
		GetAssetStateStoreByUri GetAssetsByAlias GetConnection GetDRCount GetDag GetDagRun
		GetDagRunState GetHITLDetailResponse GetPrevSuccessfulDagRun GetPreviousDagRun GetPreviousTI
		GetTICount GetTaskBreadcrumbs GetTaskRescheduleStartDate GetTaskStateStore GetTaskStates
		GetVariable GetVariableKeys GetXCom GetXComCount GetXComSequenceItem GetXComSequenceSlice
		MaskSecret PutVariable RescheduleTask ResendLoggingFD RetryTask SetAssetStateStoreByName
		SetAssetStateStoreByUri SetRenderedFields SetRenderedMapIndex SetTaskStateStore SetXCom
		SkipDownstreamTasks SucceedTask TaskState TriggerDagRun UpdateHITLDetail ValidateInletsAndOutlets`) {
		airflowRequestTypes[t] = true
	}
}

// AirflowRequestTypes lists airflowRequestTypes, sorted.
func AirflowRequestTypes() []string {
	out := make([]string, 0, len(airflowRequestTypes))
	for t := range airflowRequestTypes {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// requestRule is what Airflow's pydantic model of one request type
// requires, for the types this supervisor serves.
type requestRule struct {
	strings []string            // required string fields
	present []string            // required fields of any JSON type
	allowed map[string]bool     // nil: extra keys are ignored; else only these (extra="forbid")
	enum    map[string][]string // field -> allowed values, when present
}

func keySet(keys ...string) map[string]bool {
	m := map[string]bool{"type": true}
	for _, k := range keys {
		m[k] = true
	}
	return m
}

var requestRules = map[string]requestRule{
	protocol.TypeGetConnection:  {strings: []string{"conn_id"}},
	protocol.TypeGetVariable:    {strings: []string{"key"}},
	protocol.TypeGetXCom:        {strings: []string{"key", "dag_id", "run_id", "task_id"}},
	protocol.TypeSetXCom:        {strings: []string{"key", "dag_id", "run_id", "task_id"}, present: []string{"value"}},
	protocol.TypeMaskSecret:     {present: []string{"value"}},
	protocol.TypeGetDagRunState: {strings: []string{"dag_id", "run_id"}},
	protocol.TypeSucceedTask: {present: []string{"end_date"}, enum: map[string][]string{"state": {"success"}},
		allowed: keySet("state", "end_date", "task_outlets", "outlet_events", "rendered_map_index")},
	protocol.TypeRetryTask: {present: []string{"end_date"}, enum: map[string][]string{"state": {"up_for_retry"}},
		allowed: keySet("state", "end_date", "rendered_map_index", "retry_delay_seconds", "retry_reason")},
	protocol.TypeTaskState: {strings: []string{"state"}, enum: map[string][]string{"state": {"failed", "skipped", "removed"}}},
	protocol.TypeDeferTask: {strings: []string{"classpath", "next_method"}, enum: map[string][]string{"state": {"deferred"}},
		allowed: keySet("state", "classpath", "trigger_kwargs", "trigger_timeout", "queue", "next_method", "next_kwargs", "rendered_map_index")},
	protocol.TypeSetRenderedFields:    {present: []string{"rendered_fields"}},
	protocol.TypeSetRenderedMapIndex:  {strings: []string{"rendered_map_index"}},
	protocol.TypeGetXComSequenceSlice: {strings: []string{"key", "dag_id", "run_id", "task_id"}, present: []string{"start", "stop", "step"}},
	protocol.TypeSkipDownstreamTasks:  {present: []string{"tasks"}, allowed: keySet("tasks")},
	protocol.TypeGetAssetEventByAsset: {present: []string{"name", "uri"}},
}

// invalidRequest says why Airflow's supervisor would fail to validate a
// request body, or "" when it would accept it.
func invalidRequest(body map[string]any) string {
	typ, _ := body["type"].(string)
	if !airflowRequestTypes[typ] {
		return fmt.Sprintf("%q is not a request type Airflow's supervisor knows", typ)
	}
	rule, ok := requestRules[typ]
	if !ok {
		return ""
	}
	for _, k := range rule.strings {
		if _, ok := body[k].(string); !ok {
			return fmt.Sprintf("%s needs %s as a string, got %T", typ, k, body[k])
		}
	}
	for _, k := range rule.present {
		if _, ok := body[k]; !ok {
			return fmt.Sprintf("%s needs %s", typ, k)
		}
	}
	for k, values := range rule.enum {
		v, has := body[k]
		if !has {
			continue
		}
		s, _ := v.(string)
		if !contains(values, s) {
			return fmt.Sprintf("%s.%s is %v, want one of %s", typ, k, v, strings.Join(values, ", "))
		}
	}
	if rule.allowed != nil {
		for k := range body {
			if !rule.allowed[k] {
				return fmt.Sprintf("%s has field %q, which Airflow forbids there", typ, k)
			}
		}
	}
	if why := invalidDataModel(typ, body); why != "" {
		return why
	}
	if d, has := body["end_date"]; has && d != nil {
		switch v := d.(type) {
		case time.Time:
		case string:
			if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
				return fmt.Sprintf("%s.end_date %q is not an RFC 3339 time with a zone", typ, v)
			}
		default:
			return fmt.Sprintf("%s.end_date is a %T, not a time", typ, d)
		}
	}
	return ""
}

// invalidDataModel checks the fields of assets, mapping and rendered
// fields as Airflow's models read them: AssetProfile (extra="forbid", a
// known type), the outlet events register_asset_changes_in_db reads
// (dest_asset_key {name, uri}, an object extra), a mapped_length that is a
// count, rendered fields that are an object, and a rendered map index
// within the 250 characters of its column... or "" when they are fine.
func invalidDataModel(typ string, body map[string]any) string {
	switch typ {
	case protocol.TypeSucceedTask:
		for i, o := range listOrNil(body["task_outlets"]) {
			m, ok := o.(map[string]any)
			if !ok {
				return fmt.Sprintf("SucceedTask.task_outlets[%d] is not an AssetProfile object", i)
			}
			for k := range m {
				if k != "name" && k != "uri" && k != "type" {
					return fmt.Sprintf("SucceedTask.task_outlets[%d] has field %q, which AssetProfile forbids", i, k)
				}
			}
			name, _ := m["name"].(string)
			uri, _ := m["uri"].(string)
			switch m["type"] {
			case protocol.AssetTypeAsset:
				if name == "" || uri == "" {
					return fmt.Sprintf("SucceedTask.task_outlets[%d]: an Asset needs name and uri (the Execution API skips it otherwise)", i)
				}
			case protocol.AssetTypeNameRef, protocol.AssetTypeAlias:
				if name == "" {
					return fmt.Sprintf("SucceedTask.task_outlets[%d]: a %v needs a name", i, m["type"])
				}
			case protocol.AssetTypeURIRef:
				if uri == "" {
					return fmt.Sprintf("SucceedTask.task_outlets[%d]: an AssetUriRef needs a uri", i)
				}
			default:
				return fmt.Sprintf("SucceedTask.task_outlets[%d].type is %v, not Asset, AssetNameRef, AssetUriRef or AssetAlias", i, m["type"])
			}
		}
		for i, e := range listOrNil(body["outlet_events"]) {
			m, ok := e.(map[string]any)
			if !ok {
				return fmt.Sprintf("SucceedTask.outlet_events[%d] is not an object", i)
			}
			key, _ := m["dest_asset_key"].(map[string]any)
			if _, ok := key["name"].(string); !ok {
				return fmt.Sprintf("SucceedTask.outlet_events[%d].dest_asset_key needs name and uri", i)
			}
			if _, ok := key["uri"].(string); !ok || len(key) != 2 {
				return fmt.Sprintf("SucceedTask.outlet_events[%d].dest_asset_key must be exactly {name, uri}", i)
			}
			if _, ok := m["extra"].(map[string]any); !ok {
				return fmt.Sprintf("SucceedTask.outlet_events[%d].extra must be an object (the Execution API reads it unconditionally)", i)
			}
		}
	case protocol.TypeSetXCom:
		if v, has := body["mapped_length"]; has && v != nil {
			if n, ok := toInt(v); !ok || n < 0 {
				return fmt.Sprintf("SetXCom.mapped_length is %v, not a count", v)
			}
		}
	case protocol.TypeSetRenderedFields:
		if _, ok := body["rendered_fields"].(map[string]any); !ok {
			return "SetRenderedFields.rendered_fields must be an object"
		}
	}
	if r, ok := body["rendered_map_index"].(string); ok && len([]rune(r)) > 250 {
		return fmt.Sprintf("%s.rendered_map_index is %d characters, over the 250 Airflow's column holds", typ, len([]rune(r)))
	}
	return ""
}

func listOrNil(v any) []any {
	l, _ := v.([]any)
	return l
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// forSchema drops what the bundle's schema version does not define from a
// terminal body, as Airflow's validation does: 2026-06-16's TaskState has no
// retry_reason (pydantic ignores it there).
func forSchema(body map[string]any, version string) map[string]any {
	if body["type"] == protocol.TypeTaskState && !schema.AtLeast(version, schema.V34) {
		delete(body, "retry_reason")
	}
	return body
}
