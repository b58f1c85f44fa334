package protocol

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/pyenv"
)

// The asset events that triggered a run reach the task as Airflow sends
// them, and back out of our own supervisor's body the same.
func TestStartupDetailsCarriesTriggeringAssetEvents(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	want := []AssetEvent{{
		Asset: AssetKey{Name: "incoming", URI: "s3://bucket/incoming/"}, AssetExtra: map[string]any{},
		Extra:       map[string]any{"url": "s3://bucket/incoming/a.csv", "sha256": "ab12"},
		SourceDagID: "producer", SourceRunID: "manual__1", SourceTaskID: "export", SourceMapIndex: 2,
		SourceAliases: []string{"objects"}, Timestamp: at, PartitionKey: "2026-12-06",
	}}
	sd := StartupDetails{
		TI:     TaskInstance{ID: "0195c1f2-0000-7000-8000-000000000001", DagID: "d", TaskID: "t", RunID: "asset_triggered__1", TryNumber: 1, MapIndex: 1},
		DagRun: DagRun{DagID: "d", RunID: "asset_triggered__1", RunType: "asset_triggered", TriggeringAssetEvents: want, PartitionKey: "2026-12-06"},
	}
	p, err := EncodeReply(0, sd.Body(false), nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeMessage(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseStartupDetails(m.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got.TI.MapIndex != 1 || got.DagRun.PartitionKey != "2026-12-06" {
		t.Fatalf("map index %d, partition key %q", got.TI.MapIndex, got.DagRun.PartitionKey)
	}
	if !reflect.DeepEqual(got.DagRun.TriggeringAssetEvents, want) {
		t.Fatalf("consumed_asset_events:\n got %#v\nwant %#v", got.DagRun.TriggeringAssetEvents, want)
	}
	// A malformed entry is named, not skipped.
	m.Body["ti_context"].(map[string]any)["dag_run"].(map[string]any)["consumed_asset_events"] = []any{map[string]any{"extra": map[string]any{}}}
	if _, err := ParseStartupDetails(m.Body); err == nil || !strings.Contains(err.Error(), "consumed_asset_events[0].asset is required") {
		t.Fatalf("want the missing asset named, got %v", err)
	}
}

// The checker follows lists of messages into their items.
func TestSchemaCheckFollowsListItems(t *testing.T) {
	defs := schemaDefs(t)
	type badProfile struct {
		Nam  *string `msgpack:"nam"`
		Type string  `msgpack:"type"`
	}
	type succeed struct {
		Header
		EndDate     time.Time    `msgpack:"end_date"`
		TaskOutlets []badProfile `msgpack:"task_outlets"`
	}
	rec := &recorder{}
	checkStruct(rec, defs, "SucceedTask", reflect.TypeFor[succeed](), defs["SucceedTask"].(map[string]any))
	if !strings.Contains(strings.Join(rec.errs, "\n"), "task_outlets[]: field nam") {
		t.Fatalf("want a complaint about task_outlets[].nam, got %q", rec.errs)
	}
}

// What the runtime sends for assets, mapping and rendered fields, read by
// the pinned task SDK's supervisor decoder (the ToSupervisor union) and,
// for SucceedTask, passed on as its client does to the Execution API's
// payload model and read the way TaskInstance.register_asset_changes_in_db
// reads it.
func TestTheTaskSDKReadsOurDataModelMessages(t *testing.T) {
	name, uri, alias := "converted", "s3://bucket/converted/", "objects"
	rmi := "orders.csv"
	n := 3
	bodies := []Body{
		&SucceedTask{EndDate: time.Now().UTC(), RenderedMapIndex: &rmi,
			TaskOutlets: []AssetProfile{{Name: &name, URI: &uri, Type: AssetTypeAsset}, {Name: &alias, Type: AssetTypeAlias}},
			OutletEvents: []OutletEvent{
				{DestAssetKey: AssetKey{Name: name, URI: uri}, Extra: map[string]any{"url": "s3://bucket/converted/a.jsonl", "bytes": 10}},
				{DestAssetKey: AssetKey{Name: name, URI: uri}, Extra: map[string]any{}, PartitionKey: "p1"},
				{DestAssetKey: AssetKey{Name: "s3://x/a", URI: "s3://x/a"}, Extra: map[string]any{"k": "v"}, SourceAliasName: alias, DestAssetExtra: map[string]any{}},
			}},
		&SetRenderedFields{RenderedFields: map[string]any{"url": "s3://bucket/a.csv", "_sources": map[string]any{"url": "bundle defaults"}}},
		&SetRenderedMapIndex{RenderedMapIndex: rmi},
		&GetXComSequenceSlice{Key: "return_value", DagID: "d", RunID: "r", TaskID: "convert"},
		&SetXCom{XComTarget: XComTarget{Key: "return_value", DagID: "d", RunID: "r", TaskID: "list"}, Value: []any{"a", "b", "c"}, MappedLength: &n},
		&RetryTask{EndDate: time.Now().UTC(), RetryReason: "x", RenderedMapIndex: &rmi},
		&TaskState{State: "failed", EndDate: time.Now().UTC(), RenderedMapIndex: &rmi},
	}
	dir := t.TempDir()
	var files []string
	for i, b := range bodies {
		p, err := EncodeRequest(int64(i), b)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, b.MessageType()+".msgpack")
		if err := os.WriteFile(f, p, 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	const script = `import sys, json, msgspec
from airflow.sdk.execution_time.comms import _RequestFrame
from airflow.sdk.execution_time.supervisor import ActivitySubprocess
from airflow.sdk.api.datamodels._generated import TISuccessStatePayload
from airflow.api_fastapi.execution_api.datamodels.taskinstance import TISuccessStatePayload as APIPayload
from airflow.serialization.definitions.assets import SerializedAssetUniqueKey
out = {}
for path in sys.argv[1:]:
    frame = msgspec.msgpack.decode(open(path, "rb").read(), type=_RequestFrame)
    msg = ActivitySubprocess.decoder.validate_python(frame.body)
    got = msg.model_dump(mode="json", exclude={"end_date"})
    if msg.type == "SucceedTask":
        sent = TISuccessStatePayload(end_date=msg.end_date, task_outlets=msg.task_outlets,
            outlet_events=msg.outlet_events, rendered_map_index=msg.rendered_map_index)
        api = APIPayload.model_validate_json(sent.model_dump_json())
        got["registered"] = [
            [SerializedAssetUniqueKey(**e["dest_asset_key"]).uri, e["extra"], e.get("partition_key"), e.get("source_alias_name")]
            for e in api.outlet_events]
        got["outlets"] = [[o.type, o.name, o.uri] for o in api.task_outlets]
    out[msg.type] = got
print(json.dumps(out))
`
	cmd := exec.Command(pyenv.Python(t), append([]string{"-c", script}, files...)...)
	cmd.Stderr = os.Stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("the task SDK refused our messages: %v", err)
	}
	var got map[string]map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	checks := []struct{ what, got, want string }{
		{"outlets", js(got["SucceedTask"]["outlets"]), `[["Asset","converted","s3://bucket/converted/"],["AssetAlias","objects",null]]`},
		{"registered events", js(got["SucceedTask"]["registered"]), `[["s3://bucket/converted/",{"bytes":10,"url":"s3://bucket/converted/a.jsonl"},null,null],["s3://bucket/converted/",{},"p1",null],["s3://x/a",{"k":"v"},null,"objects"]]`},
		{"succeed rendered_map_index", js(got["SucceedTask"]["rendered_map_index"]), `"orders.csv"`},
		{"rendered fields", js(got["SetRenderedFields"]["rendered_fields"]), `{"_sources":{"url":"bundle defaults"},"url":"s3://bucket/a.csv"}`},
		{"map index", js(got["SetRenderedMapIndex"]["rendered_map_index"]), `"orders.csv"`},
		{"slice bounds", js([]any{got["GetXComSequenceSlice"]["start"], got["GetXComSequenceSlice"]["stop"], got["GetXComSequenceSlice"]["task_id"]}), `[null,null,"convert"]`},
		{"mapped length", js(got["SetXCom"]["mapped_length"]), `3`},
		{"retry rendered_map_index", js(got["RetryTask"]["rendered_map_index"]), `"orders.csv"`},
		{"failed rendered_map_index", js(got["TaskState"]["rendered_map_index"]), `"orders.csv"`},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %s, want %s", c.what, c.got, c.want)
		}
	}
}
