package bundles

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
	"github.com/airflow-sandbox/airflow-go-worker/testing/pyenv"
)

// templateCase is one template rendered for one task instance, by Airflow
// (python/realsdk/render_template.py) and by the bundle.
type templateCase struct {
	Template          string         `json:"template"`
	DagID             string         `json:"dag_id"`
	TaskID            string         `json:"task_id"`
	RunID             string         `json:"run_id"`
	RunType           string         `json:"run_type"`
	TryNumber         int            `json:"try_number"`
	MapIndex          int            `json:"map_index"`
	LogicalDate       *time.Time     `json:"logical_date"`
	DataIntervalStart *time.Time     `json:"data_interval_start"`
	DataIntervalEnd   *time.Time     `json:"data_interval_end"`
	RunAfter          time.Time      `json:"run_after"`
	Conf              map[string]any `json:"conf"`
}

func (c templateCase) render() (string, error) {
	ti := TaskInstance{DagID: c.DagID, TaskID: c.TaskID, RunID: c.RunID, TryNumber: c.TryNumber, MapIndex: c.MapIndex}
	dr := DagRun{DagID: c.DagID, RunID: c.RunID, RunType: c.RunType, RunAfter: c.RunAfter, Conf: c.Conf}
	for dst, src := range map[*time.Time]*time.Time{&dr.LogicalDate: c.LogicalDate, &dr.DataIntervalStart: c.DataIntervalStart, &dr.DataIntervalEnd: c.DataIntervalEnd} {
		if src != nil {
			*dst = *src
		}
	}
	return renderTemplate(c.Template, templateValues(ti, dr), c.Conf)
}

func ptime(s string) *time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return &t
}

// Every name a template may use renders as Airflow 3.3's own template
// context renders it (get_template_context, the Dag's Jinja environment),
// and a name Airflow leaves undefined (no logical date) fails in both.
func TestTemplatesRenderAsAirflowRendersThem(t *testing.T) {
	var all []string
	for _, n := range templateNames {
		all = append(all, "{{ "+n+" }}")
	}
	every := strings.Join(all, "|") + "|{{params.n}}|{{ dag_run.conf.f }}|{{ params.b }}|{{ params.s }}|{{ params.none }}|{{ params.big }}"
	scheduled := templateCase{Template: every, DagID: "d", TaskID: "t", RunID: "scheduled__2026-12-07T05:06:07+00:00", RunType: "scheduled",
		TryNumber: 2, MapIndex: 3, LogicalDate: ptime("2026-12-07T05:06:07.123456Z"), DataIntervalStart: ptime("2026-12-06T05:06:07Z"),
		DataIntervalEnd: ptime("2026-12-07T05:06:07.123456Z"), RunAfter: *ptime("2026-12-07T05:06:07Z"),
		Conf: map[string]any{"n": 3, "f": 1.5, "b": true, "s": "rates", "none": nil, "big": 1e21}}
	whole := scheduled
	whole.Template, whole.LogicalDate, whole.MapIndex = "rates-{{ ds }}-{{ ts }}-{{ logical_date }}", ptime("2026-01-02T00:00:00Z"), -1
	manual := templateCase{Template: "{{ ds }}", DagID: "d", TaskID: "t", RunID: "manual__1", RunType: "manual", TryNumber: 1, MapIndex: -1, RunAfter: *ptime("2026-12-07T05:06:07Z")}
	noLogicalDate := manual
	noLogicalDate.Template = "{{ run_id }}/{{ task_instance_key_str }}"
	cases := []templateCase{scheduled, whole, manual, noLogicalDate}

	dir := t.TempDir()
	in, out := filepath.Join(dir, "cases.json"), filepath.Join(dir, "out.json")
	data, _ := json.Marshal(cases)
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := pyenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(pyenv.Python(t), filepath.Join(root, "python/realsdk/render_template.py"), in, out)
	cmd.Env = append(os.Environ(), "AIRFLOW_HOME="+filepath.Join(dir, "airflow"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("render_template.py: %v\n%s", err, b)
	}
	var airflow []struct{ Rendered, Error string }
	data, _ = os.ReadFile(out)
	if err := json.Unmarshal(data, &airflow); err != nil || len(airflow) != len(cases) {
		t.Fatalf("render_template.py wrote %s: %v", data, err)
	}
	for i, c := range cases {
		got, err := c.render()
		want := airflow[i]
		switch {
		case want.Error != "" && err == nil:
			t.Errorf("%q: Airflow fails (%s), the bundle rendered %q", c.Template, want.Error, got)
		case want.Error == "" && err != nil:
			t.Errorf("%q: Airflow renders %q, the bundle failed: %v", c.Template, want.Rendered, err)
		case got != want.Rendered:
			t.Errorf("%q:\n bundle  %q\n airflow %q", c.Template, got, want.Rendered)
		}
	}
}

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
