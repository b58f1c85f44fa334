package supervisor

import (
	"strings"
	"testing"
	"time"
)

// Bodies Airflow's supervisor would not validate get no reply there, so
// they get none here; the reason names the field.
func TestInvalidRequest(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"type": "GetConnection", "conn_id": "x"}, ""},
		{map[string]any{"type": "GetConnection"}, "needs conn_id as a string"},
		{map[string]any{"type": "GetConnection", "conn_id": 7}, "needs conn_id as a string"},
		{map[string]any{"type": "SetXCom", "key": "k", "dag_id": "d", "run_id": "r", "task_id": "t"}, "SetXCom needs value"},
		{map[string]any{"type": "SucceedTask", "end_date": now, "task_outlets": []any{}, "outlet_events": []any{}}, ""},
		{map[string]any{"type": "SucceedTask"}, "SucceedTask needs end_date"},
		{map[string]any{"type": "SucceedTask", "end_date": now, "lineage": 1}, `field "lineage", which Airflow forbids`},
		{map[string]any{"type": "SucceedTask", "end_date": "yesterday"}, "not an RFC 3339 time"},
		{map[string]any{"type": "RetryTask", "end_date": now, "retry_reason": "x"}, ""},
		{map[string]any{"type": "RetryTask", "end_date": now, "reason": "x"}, `field "reason"`},
		{map[string]any{"type": "TaskState", "state": "success"}, "want one of failed, skipped, removed"},
		{map[string]any{"type": "TaskState", "state": "skipped", "retry_reason": "ignored"}, ""},
		{map[string]any{"type": "GetDagRun", "dag_id": "d", "run_id": "r"}, ""}, // known, answered Unhandled request
		{map[string]any{"type": "Hello"}, `"Hello" is not a request type`},
		{map[string]any{}, `"" is not a request type`},
	} {
		got := invalidRequest(c.body)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%v: %q, want %q", c.body, got, c.want)
		}
	}
	body := forSchema(map[string]any{"type": "TaskState", "state": "failed", "retry_reason": "boom"}, "2026-06-16")
	if _, has := body["retry_reason"]; has {
		t.Error("2026-06-16's TaskState has no retry_reason")
	}
	body = forSchema(map[string]any{"type": "TaskState", "state": "failed", "retry_reason": "boom"}, "2026-10-30")
	if body["retry_reason"] != "boom" {
		t.Error("2026-10-30's TaskState keeps retry_reason")
	}
}

func TestInvalidLogRecord(t *testing.T) {
	for _, c := range []struct {
		rec  map[string]any
		want string
	}{
		{map[string]any{"event": "x", "level": "info", "timestamp": "2026-12-01T15:24:40.597409667Z"}, ""},
		{map[string]any{"event": "x", "level": "warn"}, ""},
		{map[string]any{"event": "x"}, "no level"},
		{map[string]any{"event": "x", "level": "INFO"}, "not one of Airflow's"},
		{map[string]any{"event": "x", "level": "info", "timestamp": "yesterday"}, "not ISO 8601"},
	} {
		got := invalidLogRecord(c.rec)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%v: %q, want %q", c.rec, got, c.want)
		}
	}
}
