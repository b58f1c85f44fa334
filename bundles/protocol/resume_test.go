package protocol

import (
	"testing"
	"time"
)

// A resumed task instance's ti_context carries next_method, next_kwargs (a
// map, or the same as a JSON string) and the task instance's first start;
// Body sends them back the same way.
func TestStartupDetailsCarryTheResume(t *testing.T) {
	start := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	sd := StartupDetails{TI: TaskInstance{ID: "i", DagID: "d", TaskID: "t", RunID: "r", TryNumber: 2, MapIndex: -1},
		NextMethod: "execute_go_resume", NextKwargs: map[string]any{"go_state": "{}"}, TIStartDate: start}
	raw, err := AsRaw(sd.Body(false))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseStartupDetails(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got.NextMethod != sd.NextMethod || got.NextKwargs["go_state"] != "{}" || !got.TIStartDate.Equal(start) {
		t.Fatalf("read back %q %v %s", got.NextMethod, got.NextKwargs, got.TIStartDate)
	}
	ctx := raw["ti_context"].(map[string]any)
	ctx["next_kwargs"] = `{"go_state": "[1]"}`
	if got, err = ParseStartupDetails(raw); err != nil || got.NextKwargs["go_state"] != "[1]" {
		t.Fatalf("next_kwargs as a JSON string read as %v, %v", got.NextKwargs, err)
	}
	ctx["next_kwargs"] = "not json"
	if _, err = ParseStartupDetails(raw); err == nil {
		t.Fatal("next_kwargs that is neither a map nor a JSON object was accepted")
	}
}
