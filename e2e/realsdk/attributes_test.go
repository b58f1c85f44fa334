package realsdk_test

import (
	"fmt"
	"strings"
	"testing"
)

// The stub attributes a Go task declares, applied under Airflow 3.3's own
// supervisor (issue 37): a branch's skips reach the Execution API's
// skip-downstream route, multiple outputs become XComs of their own, an
// execution timeout ends the task up for retry naming it, and a read of an
// asset's events goes to the asset-events route.
func TestStubAttributesUnderAirflow33(t *testing.T) {
	root := t.TempDir()
	pack(t, root, "a.bundle", bundleA)
	c := func(task string) tcase {
		return tcase{Name: task, Roots: []string{root}, DagID: "attributes", TaskID: task, MaxTries: 2, ShouldRetry: true, Timeout: 60}
	}
	inlets := c("inlets")
	inlets.AssetEvents = []map[string]any{assetEvent(1, "2026-12-06T10:00:00+00:00", "old"), assetEvent(2, "2026-12-07T10:00:00+00:00", "new")}
	res := runCases(t, []tcase{c("branch"), c("outputs"), c("timeout"), inlets})

	r := res["branch"]
	r.ranClean(t)
	r.onlyState(t, "success")
	skip := r.call("PATCH", "/skip-downstream")
	if skip == nil || fmt.Sprint(skip.Body) != "map[tasks:[[left -1]]]" {
		t.Fatalf("skip-downstream call %+v, want tasks [[left -1]]", skip)
	}
	if got := fmt.Sprint(r.XComs["branch/skipmixin_key"]); got != "map[followed:[right]]" {
		t.Fatalf("skipmixin_key XCom %s", got)
	}

	r = res["outputs"]
	r.ranClean(t)
	r.onlyState(t, "success")
	if fmt.Sprint(r.XComs["outputs/rows"], r.XComs["outputs/files"]) != "3 1" || r.XComs["outputs/return_value"] == nil {
		t.Fatalf("xcoms %v, want rows, files and return_value", r.XComs)
	}

	r = res["timeout"]
	r.ranClean(t)
	r.onlyState(t, "up_for_retry")
	if !r.logged("execution_timeout of 300ms") {
		t.Errorf("the task log does not name the execution_timeout: %v", r.Logs)
	}

	r = res["inlets"]
	r.ranClean(t)
	r.onlyState(t, "success")
	get := r.call("GET", "asset-events/by-asset")
	if get == nil || get.Params["uri"] != "s3://b/orders" || get.Params["limit"] != "1" || get.Params["ascending"] != "false" {
		t.Fatalf("asset-events call %+v, want the latest one of s3://b/orders", get)
	}
	if got := fmt.Sprint(r.XComs["inlets/return_value"]); got != "map[v:new]" {
		t.Fatalf("inlets read %s, want the latest event's extra", got)
	}
}

// assetEvent is an AssetEventResponse of asset s3://b/orders.
func assetEvent(id int, ts, v string) map[string]any {
	return map[string]any{"id": id, "timestamp": ts, "extra": map[string]any{"v": v}, "created_dagruns": []any{},
		"asset":         map[string]any{"name": "orders", "uri": "s3://b/orders", "group": "asset", "extra": map[string]any{}},
		"source_dag_id": "producer", "source_run_id": "r", "source_task_id": "t", "source_map_index": -1}
}

// call is the first Execution API call of the method whose path ends with
// (or, for a path without a leading /, is) path.
func (r *result) call(method, path string) *apiCall {
	for i, c := range r.APICalls {
		if c.Method == method && (c.Path == path || strings.HasPrefix(path, "/") && strings.HasSuffix(c.Path, path)) {
			return &r.APICalls[i]
		}
	}
	return nil
}
