package bundles

import (
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// What the bundle does not render is refused when the task is registered,
// naming what it can render.
func TestTemplatesRefuseWhatIsNotRendered(t *testing.T) {
	type in struct {
		Label string `json:"label"`
		N     int    `json:"n"`
	}
	for tmpl, want := range map[string]string{
		"{{ ds | upper }}":           "no filters or macros",
		"{{ macros.ds_add(ds, 1) }}": "not rendered for a Go task",
		"{% if x %}a{% endif %}":     "statements are not rendered",
		"{{ ds ":                     "an unclosed {{",
		"{{ var.value.token }}":      "not rendered for a Go task",
		"{{ params.a b }}":           "not rendered for a Go task",
	} {
		err := New().Add("d", "t", func(in) error { return nil }, WithTemplate("label", tmpl))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", tmpl, err, want)
		}
	}
	if err := New().Add("d", "t", func(in) error { return nil }, WithTemplate("n", "{{ ds }}")); err == nil || !strings.Contains(err.Error(), "renders a string") {
		t.Errorf("a template into an int: %v", err)
	}
}

// A template binding renders at bind time; a conf key the run lacks fails
// the task, since the Dag's param default is out of the Go task's sight.
func TestTemplateBindingRendersTheRun(t *testing.T) {
	type in struct {
		Label string `json:"label"`
	}
	var got string
	s := runOne(t, func(x in) error { got = x.Label; return nil }, func(sd *protocol.StartupDetails) {
		sd.DagRun.LogicalDate = time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
		sd.DagRun.Conf = map[string]any{"region": "eu"}
	}, nil, WithTemplate("label", "rates-{{ ds }}-{{ params.region }}"))
	if s.terminal.Type() != protocol.TypeSucceedTask || got != "rates-2026-12-07-eu" {
		t.Fatalf("label %q, terminal %v", got, s.terminal.Body)
	}
	s = runOne(t, func(x in) error { return nil }, func(sd *protocol.StartupDetails) { sd.ShouldRetry = true }, nil, WithTemplate("label", "{{ params.region }}"))
	if s.terminal.Body["state"] != "failed" {
		t.Fatalf("terminal %v, want failed without retry", s.terminal.Body)
	}
}
