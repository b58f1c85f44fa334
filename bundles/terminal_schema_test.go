package bundles

import (
	"errors"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/schema"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// TaskState.retry_reason exists only from 2026-10-30: a 3.3 bundle must not
// send it (Airflow 3.3 would drop it); a 3.4 bundle carries the failure's
// reason there.
func TestFailureReasonFollowsTheSchema(t *testing.T) {
	b := New()
	b.Register("d", "fail", func() error { return errors.New("boom") })
	for version, wantReason := range map[string]bool{"": false, schema.V33: false, schema.V34: true} {
		s := runFake(t, b, startupFrame(t, "d", "fail", nil), nil, serveConfig{schema: version})
		if s.terminal == nil || s.terminal.Type() != protocol.TypeTaskState || s.terminal.Body["state"] != "failed" {
			t.Fatalf("schema %q: want TaskState failed, got %+v", version, s.terminal)
		}
		reason, has := s.terminal.Body["retry_reason"]
		if has != wantReason || (has && reason != "boom") {
			t.Errorf("schema %q: retry_reason = %v (present %v), want present %v", version, reason, has, wantReason)
		}
	}
}
