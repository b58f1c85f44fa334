package catalogue

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/tasks"
)

// outlets, expand, mapped and asset_event entries register as the
// runtime's options, and check reads them back from the bundle.
func TestConfigDeclaresOutletsAndMapping(t *testing.T) {
	b := bundles.New()
	err := Load(b, []byte(`dags:
  conv:
    tasks:
      convert:
        kind: convert
        outlets: [{uri: "s3://bucket/converted/"}, {name: report, uri: "s3://bucket/report.json"}, {alias: objects}]
        map_index: "{stage_in}"
        inputs:
          stage_in: {xcom: list_objects, expand: true}
      literal:
        kind: convert
        inputs:
          timeout: {expand: [10m, 20m]}
      gather:
        kind: destroy
        inputs:
          sandbox: {xcom: convert, mapped: true}
      consume:
        kind: destroy
        inputs:
          sandbox: {asset_event: "s3://bucket/converted/", field: extra.url}
`), "bundle.yaml")
	if err != nil {
		t.Fatal(err)
	}
	convert := describeTask(b, "conv", "convert")
	assets, aliases := convert.Outlets, convert.Aliases
	if len(assets) != 2 || assets[1].Name != "report" || len(aliases) != 1 || aliases[0] != "objects" {
		t.Fatalf("outlets %v, aliases %v", assets, aliases)
	}
	exp := convert.Expansions
	if exp["stage_in"].XComTask != "list_objects" {
		t.Fatalf("expansions %+v", exp)
	}
	exp = describeTask(b, "conv", "literal").Expansions
	if !exp["timeout"].Literal || len(exp["timeout"].Items) != 2 {
		t.Fatalf("literal expansion %+v", exp)
	}
}

func TestConfigRefusesBadOutletsAndBindings(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{`outlets: [{alias: a, uri: "s3://x/"}]`, "outlets[0]: an entry is an asset"},
		{`outlets: [{}]`, "outlets[0]: give the asset's uri"},
		{`outlets: [{url: "s3://x/"}]`, `line 1: dags.d.tasks.t.outlets[0]: unknown key "url" in an outlet; allowed: uri, name, alias`},
		{`inputs: {sandbox: {expand: true}}`, "expand: true and mapped: true read an upstream's XCom"},
		{`inputs: {sandbox: {xcom: p, expand: "yes"}}`, "expand is true"},
		{`inputs: {sandbox: {field: extra.url}}`, "give asset_event"},
		{`inputs: {sandbox: {xcom: p, expand: true, mapped: true}}`, "exclude each other"},
		{`map_index: "{nope}"`, "names no input field"},
	} {
		err := Load(bundles.New(), []byte("dags: {d: {tasks: {t: {kind: destroy, "+c.yaml+"}}}}"), "bundle.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: want %q, got %v", c.yaml, c.want, err)
		}
	}
}

// What a catalogue task exported reaches its outlet events' extra.
func TestExportsDescribeTheOutletEvent(t *testing.T) {
	k := adapt(func(_ context.Context, d tasks.Deps, _ tasks.ExportInput) ([]string, error) {
		d.OnExported([]tasks.ExportedFile{{URL: "s3://bucket/converted/a.jsonl", Bytes: 12, SHA256: "ab"}})
		return []string{"s3://bucket/converted/a.jsonl"}, nil
	})
	fn := k.fn.(func(context.Context, bundles.TaskInstance, tasks.Airflow, hclog.Logger, *bundles.Outlets, tasks.ExportInput) ([]string, error))
	o := bundles.NewOutlets([]bundles.Asset{{URI: "s3://bucket/converted/"}}, nil)
	if _, err := fn(context.Background(), bundles.TaskInstance{DagID: "d", RunID: "r", TaskID: "t"}, &cliAirflow{}, hclog.NewNullLogger(), o, tasks.ExportInput{}); err != nil {
		t.Fatal(err)
	}
	ev, err := o.Event("s3://bucket/converted/")
	if err != nil {
		t.Fatal(err)
	}
	x := ev.Extra()
	if x["url"] != "s3://bucket/converted/a.jsonl" || x["bytes"] != int64(12) || x["sha256"] != "ab" || len(x["urls"].([]any)) != 1 {
		t.Fatalf("extra %v", x)
	}
	// A task without asset outlets exports as before, with no extra.
	if _, err := fn(context.Background(), bundles.TaskInstance{DagID: "d", RunID: "r", TaskID: "t"}, &cliAirflow{}, hclog.NewNullLogger(), bundles.NewOutlets(nil, nil), tasks.ExportInput{}); err != nil {
		t.Fatalf("no outlets: %v", err)
	}
}
