package schema

import (
	"strings"
	"testing"
)

func TestSchemaForAirflow(t *testing.T) {
	for release, want := range map[string]string{"3.3": V33, "3.3.2": V33, "3.4": V34, "3.4.0": V34} {
		if got, err := ForAirflow(release); err != nil || got != want {
			t.Errorf("ForAirflow(%q) = %q, %v; want %q", release, got, err, want)
		}
	}
	if known, _ := AirflowKnows("3.3"); strings.Join(known, ",") != V33 {
		t.Errorf("Airflow 3.3 knows only %s, got %v", V33, known)
	}
	if known, _ := AirflowKnows("3.4"); strings.Join(known, ",") != V33+","+V34 {
		t.Errorf("Airflow 3.4 knows both, got %v", known)
	}
	for _, bad := range []string{"2.10", "3", "3.5", ""} {
		if _, err := ForAirflow(bad); err == nil || !strings.Contains(err.Error(), "3.3 or 3.4") {
			t.Errorf("ForAirflow(%q): %v", bad, err)
		}
	}
	if err := Check("2026-07-30"); err == nil || !strings.Contains(err.Error(), Known()) {
		t.Errorf("an unknown version must list the known ones: %v", err)
	}
}
