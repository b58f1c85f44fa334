package bundles

import (
	"errors"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

func TestSchemaForAirflow(t *testing.T) {
	for release, want := range map[string]string{"3.3": Schema33, "3.3.2": Schema33, "3.4": Schema34, "3.4.0": Schema34} {
		if got, err := SchemaForAirflow(release); err != nil || got != want {
			t.Errorf("SchemaForAirflow(%q) = %q, %v; want %q", release, got, err, want)
		}
	}
	if known, _ := AirflowSchemaVersions("3.3"); strings.Join(known, ",") != Schema33 {
		t.Errorf("Airflow 3.3 knows only %s, got %v", Schema33, known)
	}
	if known, _ := AirflowSchemaVersions("3.4"); strings.Join(known, ",") != Schema33+","+Schema34 {
		t.Errorf("Airflow 3.4 knows both, got %v", known)
	}
	for _, bad := range []string{"2.10", "3", "3.5", ""} {
		if _, err := SchemaForAirflow(bad); err == nil || !strings.Contains(err.Error(), "3.3 or 3.4") {
			t.Errorf("SchemaForAirflow(%q): %v", bad, err)
		}
	}
	if err := CheckSchemaVersion("2026-07-30"); err == nil || !strings.Contains(err.Error(), KnownSchemaVersions()) {
		t.Errorf("an unknown version must list the known ones: %v", err)
	}
}

// TaskState.retry_reason exists only from 2026-10-30: a 3.3 bundle must not
// send it (Airflow 3.3 would drop it); a 3.4 bundle carries the failure's
// reason there.
func TestFailureReasonFollowsTheSchema(t *testing.T) {
	b := New()
	b.Register("d", "fail", func() error { return errors.New("boom") })
	for schema, wantReason := range map[string]bool{"": false, Schema33: false, Schema34: true} {
		s := runFake(t, b, startupFrame(t, "d", "fail", nil), nil, serveConfig{schema: schema})
		if s.terminal == nil || s.terminal.Type() != protocol.TypeTaskState || s.terminal.Body["state"] != "failed" {
			t.Fatalf("schema %q: want TaskState failed, got %+v", schema, s.terminal)
		}
		reason, has := s.terminal.Body["retry_reason"]
		if has != wantReason || (has && reason != "boom") {
			t.Errorf("schema %q: retry_reason = %v (present %v), want present %v", schema, reason, has, wantReason)
		}
	}
}
