package bundles

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// TestWireMatchesAirflowGoSDK replays the task of the protocol spec's
// Appendix (frames observed from Airflow's own Go SDK): read a connection
// and a variable, return a map. Our runtime must send the same request ids,
// the same body keys and the same wire types.
func TestWireMatchesAirflowGoSDK(t *testing.T) {
	b := New()
	b.Register("peer_dag", "ok", func(ctx context.Context, c Client) (map[string]any, error) {
		conn, err := c.GetConnection(ctx, "selftest_http")
		if err != nil {
			return nil, err
		}
		if _, err := c.GetVariable(ctx, "selftest_var"); err != nil {
			return nil, err
		}
		return map[string]any{"host": conn.Host}, nil
	})
	runID := "manual__2026-11-29T00:00:00+00:00"
	before := time.Now()
	s := runFake(t, b, startupFrame(t, "peer_dag", "ok", func(sd *protocol.StartupDetails) {
		sd.TI.RunID, sd.DagRun.RunID = runID, runID
	}), func(m protocol.Message) (map[string]any, map[string]any) {
		switch m.Type() {
		case "GetConnection":
			return map[string]any{"type": "ConnectionResult", "conn_id": "selftest_http", "conn_type": "http", "host": "example.internal"}, nil
		case "GetVariable":
			return map[string]any{"type": "VariableResult", "key": "selftest_var", "value": "v"}, nil
		}
		return nil, nil
	}, serveConfig{})
	if s.err != nil {
		t.Fatal(s.err)
	}
	want := []struct {
		id   int64
		keys []string
	}{
		{0, []string{"conn_id", "type"}},
		{1, []string{"key", "type"}},
		{2, []string{"dag_id", "key", "run_id", "task_id", "type", "value"}},
	}
	if len(s.requests) != len(want) {
		t.Fatalf("want %d requests, got %d: %+v", len(want), len(s.requests), s.requests)
	}
	for i, w := range want {
		m := s.requests[i]
		if m.ID != w.id {
			t.Errorf("request %d (%s): id %d, want %d (ids count from 0 per process)", i, m.Type(), m.ID, w.id)
		}
		if keys := slices.Sorted(maps.Keys(m.Body)); !slices.Equal(keys, w.keys) {
			t.Errorf("request %d (%s): keys %v, want %v", i, m.Type(), keys, w.keys)
		}
	}
	x := s.requests[2].Body
	if x["type"] != "SetXCom" || x["key"] != "return_value" || x["run_id"] != runID || x["task_id"] != "ok" || x["dag_id"] != "peer_dag" {
		t.Errorf("SetXCom body %v", x)
	}
	if v, _ := x["value"].(map[string]any); v["host"] != "example.internal" {
		t.Errorf("SetXCom value %v", x["value"])
	}
	term := s.terminal
	if term == nil || term.ID != 0 || term.Type() != "SucceedTask" {
		t.Fatalf("terminal frame %+v, want SucceedTask with id 0", term)
	}
	if keys := slices.Sorted(maps.Keys(term.Body)); !slices.Equal(keys, []string{"end_date", "outlet_events", "task_outlets", "type"}) {
		t.Errorf("SucceedTask keys %v", keys)
	}
	if end, ok := term.Body["end_date"].(time.Time); !ok || end.Before(before.Truncate(time.Microsecond)) || end.After(time.Now()) {
		t.Errorf("end_date must be a msgpack timestamp of now, got %T %v", term.Body["end_date"], term.Body["end_date"])
	}
}

// TestTerminalFramesMatchAirflowGoSDK checks the failure, retry and removed
// terminal bodies key by key against the Appendix.
func TestTerminalFramesMatchAirflowGoSDK(t *testing.T) {
	for _, tc := range []struct {
		task  string
		retry bool
		keys  []string
		state string
	}{
		{"fail", false, []string{"end_date", "state", "type"}, "failed"},
		{"fail", true, []string{"end_date", "retry_reason", "type"}, ""},
		{"no_such_task", false, []string{"end_date", "state", "type"}, "removed"},
	} {
		s := runFake(t, testBundle(), startupFrame(t, "d", tc.task, func(sd *protocol.StartupDetails) { sd.ShouldRetry = tc.retry }), nil, serveConfig{})
		term := s.terminal
		if term == nil || term.ID != 0 {
			t.Fatalf("%s retry=%v: terminal %+v, want one with id 0", tc.task, tc.retry, term)
		}
		if keys := slices.Sorted(maps.Keys(term.Body)); !slices.Equal(keys, tc.keys) {
			t.Errorf("%s retry=%v: keys %v, want %v", tc.task, tc.retry, keys, tc.keys)
		}
		if st, _ := term.Body["state"].(string); st != tc.state {
			t.Errorf("%s retry=%v: state %q, want %q", tc.task, tc.retry, st, tc.state)
		}
		if _, ok := term.Body["end_date"].(time.Time); !ok {
			t.Errorf("%s retry=%v: end_date is %T, want a msgpack timestamp", tc.task, tc.retry, term.Body["end_date"])
		}
	}
}

// The terminal frame reuses the StartupDetails frame's id (0 from Airflow),
// whatever it is; request ids still count from 0.
func TestTerminalReusesTheStartupDetailsID(t *testing.T) {
	sd := (protocol.StartupDetails{TI: protocol.TaskInstance{ID: "0195c1f2-0000-7000-8000-000000000001", DagID: "d", TaskID: "greet",
		RunID: "r", TryNumber: 1, MapIndex: -1}}).Body(true)
	first, err := protocol.EncodeReply(7, sd, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := runFake(t, testBundle(), first, nil, serveConfig{})
	if s.terminal == nil || s.terminal.ID != 7 {
		t.Fatalf("terminal %+v, want id 7", s.terminal)
	}
	if len(s.rendered) != 1 || s.rendered[0].ID != 0 {
		t.Fatalf("the first request, SetRenderedFields, must have id 0, got %+v", s.rendered)
	}
	if len(s.requests) != 1 || s.requests[0].ID != 1 {
		t.Fatalf("the SetXCom request must have id 1, got %+v", s.requests)
	}
}
