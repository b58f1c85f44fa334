package bundles

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

type convertIn struct {
	URL      string `json:"url"`
	Password string `json:"password"`
	Timeout  int    `json:"timeout"`
}

// runOne registers fn as d.t with opts and runs it once, with mutate
// applied to its StartupDetails and reply answering its requests.
func runOne(t *testing.T, fn any, mutate func(*protocol.StartupDetails), reply replyFunc, opts ...TaskOption) session {
	t.Helper()
	b := New()
	b.Register("d", "t", fn, opts...)
	s := runFake(t, b, startupFrame(t, "d", "t", mutate), reply, serveConfig{})
	if s.err != nil {
		t.Fatal(s.err)
	}
	if s.terminal == nil {
		t.Fatal("no terminal frame")
	}
	return s
}

func TestOutletsAndTheirEventsEndTheTask(t *testing.T) {
	converted := Asset{URI: "s3://bucket/converted/"}
	named := Asset{Name: "report", URI: "s3://bucket/report.json"}
	s := runOne(t, func(ctx context.Context, o *Outlets) error {
		if err := o.SetExtra("bytes", 42); err != nil {
			return err
		}
		ev, err := o.Event("report")
		if err != nil {
			return err
		}
		if err := ev.AddPartitionKeys("2026-12-01", "2026-12-02"); err != nil {
			return err
		}
		if _, err := o.Event("s3://elsewhere/"); err == nil || !strings.Contains(err.Error(), "not an outlet") {
			t.Errorf("an undeclared asset must be refused, got %v", err)
		}
		return o.AliasEvent("by_object", Asset{URI: "s3://bucket/converted/a.jsonl"}, map[string]any{"url": "s3://bucket/converted/a.jsonl"})
	}, nil, nil, WithOutlets(converted, named), WithOutletAliases("by_object"))
	if s.terminal.Type() != protocol.TypeSucceedTask {
		t.Fatalf("want SucceedTask, got %v", s.terminal.Body)
	}
	var profiles []string
	for _, p := range s.terminal.Body["task_outlets"].([]any) {
		m := p.(map[string]any)
		profiles = append(profiles, m["type"].(string)+" "+str(m["name"])+" "+str(m["uri"]))
	}
	want := []string{"Asset s3://bucket/converted/ s3://bucket/converted/", "Asset report s3://bucket/report.json", "AssetAlias by_object "}
	if !reflect.DeepEqual(profiles, want) {
		t.Fatalf("task_outlets = %q, want %q", profiles, want)
	}
	var events []string
	for _, e := range s.terminal.Body["outlet_events"].([]any) {
		m := e.(map[string]any)
		key := m["dest_asset_key"].(map[string]any)
		events = append(events, key["uri"].(string)+" pk="+str(m["partition_key"])+" alias="+str(m["source_alias_name"])+" extra="+toJSON(m["extra"]))
	}
	want = []string{
		`s3://bucket/converted/ pk= alias= extra={"bytes":42}`,
		`s3://bucket/report.json pk=2026-12-01 alias= extra={"bytes":42}`,
		`s3://bucket/report.json pk=2026-12-02 alias= extra={"bytes":42}`,
		`s3://bucket/converted/a.jsonl pk= alias=by_object extra={"url":"s3://bucket/converted/a.jsonl"}`,
	}
	if !reflect.DeepEqual(events, want) {
		t.Fatalf("outlet_events =\n%q\nwant\n%q", events, want)
	}
}

// A failed task reports no outlets: only SucceedTask carries them, and the
// events must not fire for output that was not written.
func TestNoOutletEventsWithoutSuccess(t *testing.T) {
	s := runOne(t, func(o *Outlets) error {
		o.SetExtra("url", "s3://x/y")
		return FailNoRetry(errors.New("conversion failed"))
	}, nil, nil, WithOutlets(Asset{URI: "s3://x/"}))
	if s.terminal.Type() != protocol.TypeTaskState || s.terminal.Body["state"] != "failed" {
		t.Fatalf("want failed, got %v", s.terminal.Body)
	}
	if _, has := s.terminal.Body["task_outlets"]; has {
		t.Fatalf("a failed task sent outlets: %v", s.terminal.Body)
	}
}

func TestOutletRegistrationChecked(t *testing.T) {
	b := New()
	for _, c := range []struct {
		opt  TaskOption
		want string
	}{
		{WithOutlets(Asset{}), "needs a uri or a name"},
		{WithOutlets(Asset{URI: "s3://a/"}, Asset{Name: "s3://a/"}), "declared twice"},
		{WithMapIndexTemplate("{nope}"), "names no input field"},
		{WithExpandXCom("url", "list"), ""},
	} {
		err := b.Add("d", "t"+string(rune('a'+len(b.refs()))), func(in convertIn) error { return nil }, c.opt)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("want %q, got %v", c.want, err)
		}
	}
	err := b.Add("d", "two", func(in convertIn) error { return nil }, WithExpandXCom("url", "a"), WithExpandItems("timeout", 1, 2))
	if err == nil || !strings.Contains(err.Error(), "cross product") {
		t.Errorf("two expanded inputs must be refused, got %v", err)
	}
}

func events(ts ...time.Time) []protocol.AssetEvent {
	var out []protocol.AssetEvent
	for i, at := range ts {
		out = append(out, protocol.AssetEvent{Asset: Asset{Name: "s3://bucket/incoming/", URI: "s3://bucket/incoming/"},
			Extra: map[string]any{"url": "s3://bucket/incoming/" + string(rune('a'+i)) + ".csv"}, SourceDagID: "producer",
			SourceRunID: "manual__1", SourceTaskID: "export", SourceMapIndex: -1, Timestamp: at})
	}
	return out
}

func TestAssetEventBinding(t *testing.T) {
	now := time.Now().UTC()
	// Sent out of order: the latest by timestamp wins, whatever the order.
	evs := events(now, now.Add(-time.Minute))
	var got convertIn
	var all struct {
		URLs []string `json:"urls"`
	}
	var dr DagRun
	s := runOne(t, func(in convertIn, d DagRun) error { got, dr = in, d; return nil }, func(sd *protocol.StartupDetails) {
		sd.DagRun.TriggeringAssetEvents = evs
		sd.DagRun.RunID = "asset_triggered__2026"
	}, nil, WithAssetEvent("url", "s3://bucket/incoming/", "extra.url"))
	if s.terminal.Type() != protocol.TypeSucceedTask || got.URL != "s3://bucket/incoming/a.csv" {
		t.Fatalf("bound url %q (%v), want the latest event's extra.url", got.URL, s.terminal.Body)
	}
	if len(dr.TriggeringAssetEvents) != 2 || dr.TriggeringAssetEvents[1].Extra["url"] != "s3://bucket/incoming/a.csv" || dr.TriggeringAssetEvents[0].SourceTaskID != "export" {
		t.Fatalf("DagRun.TriggeringAssetEvents = %+v, want both, oldest first", dr.TriggeringAssetEvents)
	}
	src := s.rendered[0].Body["rendered_fields"].(map[string]any)[protocol.SourcesField].(map[string]any)["url"].(string)
	if !strings.Contains(src, "asset event") {
		t.Fatalf("the rendered source of url is %q", src)
	}

	runOne(t, func(in struct {
		URLs []string `json:"urls"`
	}) error {
		all.URLs = in.URLs
		return nil
	}, func(sd *protocol.StartupDetails) { sd.DagRun.TriggeringAssetEvents = evs }, nil, WithAssetEvents("urls", "s3://bucket/incoming/", "extra.url"))
	if !reflect.DeepEqual(all.URLs, []string{"s3://bucket/incoming/b.csv", "s3://bucket/incoming/a.csv"}) {
		t.Fatalf("all events: %q, want both, oldest first", all.URLs)
	}

	// A manual run has no events: the input keeps its default.
	got = convertIn{}
	runOne(t, func(in convertIn) error { got = in; return nil }, nil, nil,
		WithAssetEvent("url", "s3://bucket/incoming/", "extra.url"), WithDefaults(map[string]any{"url": "s3://bucket/incoming/default.csv"}))
	if got.URL != "s3://bucket/incoming/default.csv" {
		t.Fatalf("without events the default must stay, got %q", got.URL)
	}

	// An event without the field fails the task, naming what it has.
	ran := false
	s = runOne(t, func(in convertIn) error { ran = true; return nil }, func(sd *protocol.StartupDetails) {
		sd.DagRun.TriggeringAssetEvents = evs
		sd.ShouldRetry = true
	}, nil, WithAssetEvent("url", "s3://bucket/incoming/", "extra.object"))
	if ran || s.terminal.Type() != protocol.TypeTaskState || s.terminal.Body["state"] != "failed" {
		t.Fatalf("a missing field must fail the task without retry before it runs, got %v (ran %v)", s.terminal.Body, ran)
	}
	if !strings.Contains(logText(s), "has no extra.object; its extra has keys [url]") {
		t.Fatalf("the log must name the missing field and the keys there are: %s", logText(s))
	}
}

// xcoms answers GetXCom and GetXComSequenceSlice from fixed values.
func xcoms(t *testing.T, values map[string]any, slices map[string][]any) replyFunc {
	return func(m protocol.Message) (map[string]any, map[string]any) {
		switch m.Type() {
		case protocol.TypeGetXCom:
			if _, has := m.Body["map_index"]; has {
				t.Errorf("reading an unmapped upstream's list must not name a map index: %v", m.Body)
			}
			return map[string]any{"type": "XComResult", "key": m.Body["key"], "value": values[m.Body["task_id"].(string)]}, nil
		case protocol.TypeGetXComSequenceSlice:
			for _, k := range []string{"start", "stop", "step"} {
				if v, has := m.Body[k]; !has || v != nil {
					t.Errorf("GetXComSequenceSlice.%s must be null (all of them), got %v", k, m.Body)
				}
			}
			return map[string]any{"type": "XComSequenceSliceResult", "root": slices[m.Body["task_id"].(string)]}, nil
		}
		return nil, nil
	}
}

func TestMappedTaskTakesItsElement(t *testing.T) {
	list := []any{"s3://b/a.csv", "s3://b/b.csv", "s3://b/c.csv"}
	for _, c := range []struct {
		name string
		opt  TaskOption
	}{
		{"over an upstream's XCom", WithExpandXCom("url", "list_objects")},
		{"over a literal list", WithExpandItems("url", list...)},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got convertIn
			var ti TaskInstance
			s := runOne(t, func(in convertIn, i TaskInstance) (string, error) { got, ti = in, i; return "done " + in.URL, nil },
				func(sd *protocol.StartupDetails) { sd.TI.MapIndex = 2 }, xcoms(t, map[string]any{"list_objects": list}, nil),
				c.opt, WithMapIndexTemplate("convert {url}"))
			if got.URL != "s3://b/c.csv" || ti.MapIndex != 2 {
				t.Fatalf("map index 2 bound %q (ti.MapIndex %d), want the third element", got.URL, ti.MapIndex)
			}
			var setIndex, push map[string]any
			for _, r := range s.requests {
				switch r.Type() {
				case protocol.TypeSetRenderedMapIndex:
					setIndex = r.Body
				case protocol.TypeSetXCom:
					push = r.Body
				}
			}
			if setIndex["rendered_map_index"] != "convert s3://b/c.csv" || s.terminal.Body["rendered_map_index"] != "convert s3://b/c.csv" {
				t.Fatalf("rendered map index: request %v, terminal %v", setIndex, s.terminal.Body)
			}
			if mi, _ := asInt(push["map_index"]); mi != 2 {
				t.Fatalf("a mapped instance pushes under its map index, got %v", push)
			}
		})
	}
	// Unmapped or past the end: fail before the body runs, saying why.
	for _, mi := range []int{-1, 3} {
		ran := false
		s := runOne(t, func(in convertIn) error { ran = true; return nil }, func(sd *protocol.StartupDetails) { sd.TI.MapIndex = mi },
			xcoms(t, map[string]any{"list_objects": list}, nil), WithExpandXCom("url", "list_objects"))
		if ran || s.terminal.Body["state"] != "failed" {
			t.Fatalf("map index %d: want failed before the body, got %v", mi, s.terminal.Body)
		}
	}
}

func TestUpstreamOfAMappedTaskPushesItsLength(t *testing.T) {
	b := New()
	b.Register("d", "list_objects", func() ([]string, error) { return []string{"a", "b", "c"}, nil })
	b.Register("d", "not_a_list", func() (string, error) { return "a", nil }, WithMappedDownstream())
	b.Register("d", "convert", func(in convertIn) error { return nil }, WithExpandXCom("url", "list_objects"))
	b.Register("d", "alone", func() ([]string, error) { return []string{"a"}, nil })
	length := func(task string) (any, bool, session) {
		s := runFake(t, b, startupFrame(t, "d", task, nil), nil, serveConfig{})
		for _, r := range s.requests {
			if r.Type() == protocol.TypeSetXCom {
				v, has := r.Body["mapped_length"]
				return v, has, s
			}
		}
		return nil, false, s
	}
	if v, has, _ := length("list_objects"); !has || v != int8(3) && v != int64(3) && v != uint8(3) {
		t.Fatalf("list_objects feeds convert's expand: want mapped_length 3, got %v (%T)", v, v)
	}
	if _, has, _ := length("alone"); has {
		t.Fatal("a task nothing maps over must not send mapped_length")
	}
	if _, _, s := length("not_a_list"); s.terminal.Body["state"] != "failed" {
		t.Fatalf("a non-list feeding a mapped task must fail, got %v", s.terminal.Body)
	}
}

func TestDownstreamCollectsMappedResults(t *testing.T) {
	var got struct {
		Results []map[string]any `json:"results"`
	}
	results := []any{map[string]any{"url": "a"}, map[string]any{"url": "b"}, map[string]any{"url": "c"}}
	runOne(t, func(in struct {
		Results []map[string]any `json:"results"`
	}) error {
		got.Results = in.Results
		return nil
	}, nil, xcoms(t, nil, map[string][]any{"convert": results}), WithMappedXCom("results", "convert"))
	if len(got.Results) != 3 || got.Results[2]["url"] != "c" {
		t.Fatalf("collected %v, want the three mapped results in order", got.Results)
	}
}

func TestRenderedFieldsMaskAndMarkSources(t *testing.T) {
	s := runOne(t, func(in convertIn) error { return nil }, func(sd *protocol.StartupDetails) {
		sd.DagRun.Conf = map[string]any{"timeout": 30}
	}, nil, WithDefaults(map[string]any{"url": "s3://user:hunter2@bucket/key", "password": "p4ss"}), AllowConf("timeout"))
	if len(s.rendered) != 1 {
		t.Fatalf("want one SetRenderedFields, got %d", len(s.rendered))
	}
	f := s.rendered[0].Body["rendered_fields"].(map[string]any)
	if f["password"] != maskedValue || strings.Contains(toJSON(f), "hunter2") || strings.Contains(toJSON(f), "p4ss") {
		t.Fatalf("secrets reached the rendered fields: %v", f)
	}
	if !strings.Contains(f["url"].(string), "s3://") {
		t.Fatalf("the url must stay readable, got %v", f["url"])
	}
	if n, _ := asInt(f["timeout"]); n != 30 {
		t.Fatalf("timeout = %v", f["timeout"])
	}
	src := f[protocol.SourcesField].(map[string]any)
	if src["timeout"] != `dag_run.conf["timeout"]` || src["url"] != "bundle defaults" {
		t.Fatalf("sources = %v, want timeout marked as set by dag_run.conf", src)
	}
}

func str(v any) string { s, _ := v.(string); return s }

func toJSON(v any) string {
	j, _ := toJSONValue(v)
	data, _ := jsonMarshal(j)
	return string(data)
}

func asInt(v any) (int64, bool) {
	f, ok := toFloat(v)
	if !ok {
		switch n := v.(type) {
		case int8:
			return int64(n), true
		case uint8:
			return int64(n), true
		case int16:
			return int64(n), true
		case int32:
			return int64(n), true
		}
	}
	return int64(f), ok
}

func logText(s session) string {
	var b strings.Builder
	for _, l := range s.logs {
		for k, v := range l {
			b.WriteString(k + "=" + toJSON(v) + " ")
		}
		b.WriteString("\n")
	}
	return b.String()
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// Rendered fields show what a task ran with: text that is not a URL
// stays exactly as the task saw it, and only the URLs inside a value lose
// their credentials and query values.
func TestRenderedFieldsKeepPlainTextWhole(t *testing.T) {
	cl := &client{} // no secrets known
	for in, want := range map[string]string{
		"echo hi/there":    "echo hi/there",
		"convert --to pdf": "convert --to pdf",
		"/data/in.csv":     "/data/in.csv",
		"a?b=1":            "a?b=1",
		"curl -fsS https://bot:t0k3n@api.example/x":   "curl -fsS https://***@api.example/x",
		"s3://bucket/key?X-Amz-Signature=abc ok":      "s3://bucket/key?X-Amz-Signature=*** ok",
		`echo "s3://u:p@b/k" and file:///tmp/out.txt`: `echo "s3://***@b/k" and file:///tmp/out.txt`,
	} {
		if got := cl.maskValue("command", in); got != want {
			t.Errorf("rendered %q as %q, want %q", in, got, want)
		}
	}
}

// An input named field[entry] sets one entry of a mapping input, beside
// the defaults' entries: a mapped conversion stages its own object in as
// in/data.csv, a report task the object the triggering event names.
func TestBindingAnEntryOfAMapping(t *testing.T) {
	type stageIn struct {
		StageIn map[string]string `json:"stage_in"`
	}
	list := []any{"s3://b/a.csv", "s3://b/b.csv", "s3://b/c.csv"}
	var got stageIn
	s := runOne(t, func(in stageIn) error { got = in; return nil }, func(sd *protocol.StartupDetails) { sd.TI.MapIndex = 1 },
		xcoms(t, map[string]any{"list_objects": list}, nil),
		WithExpandXCom("stage_in[in/data.csv]", "list_objects"), WithDefaults(map[string]any{"stage_in": map[string]any{"in/schema.json": "s3://b/schema.json"}}),
		WithMapIndexTemplate("convert {stage_in[in/data.csv]}"))
	if want := map[string]string{"in/data.csv": "s3://b/b.csv", "in/schema.json": "s3://b/schema.json"}; !reflect.DeepEqual(got.StageIn, want) {
		t.Fatalf("stage_in = %v, want the defaults' entry and this instance's element as in/data.csv: %v", got.StageIn, want)
	}
	if s.terminal.Body["rendered_map_index"] != "convert s3://b/b.csv" {
		t.Fatalf("rendered map index %v, want the entry's value", s.terminal.Body["rendered_map_index"])
	}
	got = stageIn{}
	runOne(t, func(in stageIn) error { got = in; return nil }, func(sd *protocol.StartupDetails) { sd.DagRun.TriggeringAssetEvents = events(time.Now()) },
		nil, WithAssetEvent("stage_in[in/orders.jsonl]", "s3://bucket/incoming/", "extra.url"))
	if want := map[string]string{"in/orders.jsonl": "s3://bucket/incoming/a.csv"}; !reflect.DeepEqual(got.StageIn, want) {
		t.Fatalf("stage_in = %v, want %v (no defaults)", got.StageIn, want)
	}

	for _, c := range []struct {
		opt  TaskOption
		want string
	}{
		{WithExpandXCom("url[x]", "list"), `[x] names an entry of a mapping, and url is a string`},
		{WithExpandXCom("stage_in[", "list"), "write field[entry]"},
		{WithExpandXCom("stage_in[]", "list"), "write field[entry]"},
		{WithExpandXCom("nope[x]", "list"), `input "nope" (bound to {xcom: list, expand: true}) matches no input field`},
	} {
		err := New().Add("d", "t", func(in struct {
			URL     string            `json:"url"`
			StageIn map[string]string `json:"stage_in"`
		}) error {
			return nil
		}, c.opt)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error containing %q, got %v", c.want, err)
		}
	}
}

// A field path walks lists by index: an export of two files puts them in
// extra.urls, and a consumer takes the first.
func TestFieldPathIndexesLists(t *testing.T) {
	extra := map[string]any{"extra": map[string]any{"urls": []any{"s3://b/x.jsonl", "s3://b/x.jsonl.gz"}}}
	for path, want := range map[string]any{"extra.urls.0": "s3://b/x.jsonl", "extra.urls.1": "s3://b/x.jsonl.gz", "extra.urls.2": nil, "extra.urls.-1": nil, "extra.urls.x": nil, "extra.urls.0.y": nil} {
		got, ok := lookupPath(extra, path)
		if ok != (want != nil) || got != want && want != nil {
			t.Errorf("%s: got %v (%v), want %v", path, got, ok, want)
		}
	}
}

// A task names its mapped instance itself through the client: the name is
// sent at once and kept in the terminal frame, cut to Airflow's column.
func TestClientSetsTheRenderedMapIndex(t *testing.T) {
	long := strings.Repeat("x", maxMapIndexName+10)
	// A mapped instance takes its element from an expanded input (one
	// that takes none is refused).
	s := runOne(t, func(ctx context.Context, c Client, _ convertIn) error {
		if err := c.SetRenderedMapIndex(ctx, "first"); err != nil {
			return err
		}
		return c.SetRenderedMapIndex(ctx, long)
	}, func(sd *protocol.StartupDetails) { sd.TI.MapIndex = 1 }, nil, WithExpandItems("url", "a", "b"))
	var sent []any
	for _, r := range s.requests {
		if r.Type() == protocol.TypeSetRenderedMapIndex {
			sent = append(sent, r.Body["rendered_map_index"])
		}
	}
	cut := strings.Repeat("x", maxMapIndexName-1) + "…"
	if len(sent) != 2 || sent[0] != "first" || sent[1] != cut {
		t.Fatalf("SetRenderedMapIndex requests %q, want first then the cut name", sent)
	}
	if s.terminal.Type() != protocol.TypeSucceedTask || s.terminal.Body["rendered_map_index"] != cut {
		t.Fatalf("terminal %v: want SucceedTask keeping the last name", s.terminal.Body)
	}
}
