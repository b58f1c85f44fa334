package jinja

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
// (python/realsdk/render_template.py) and by this package.
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
	ti := protocol.TaskInstance{DagID: c.DagID, TaskID: c.TaskID, RunID: c.RunID, TryNumber: c.TryNumber, MapIndex: c.MapIndex}
	dr := protocol.DagRun{DagID: c.DagID, RunID: c.RunID, RunType: c.RunType, RunAfter: c.RunAfter, Conf: c.Conf}
	for dst, src := range map[*time.Time]*time.Time{&dr.LogicalDate: c.LogicalDate, &dr.DataIntervalStart: c.DataIntervalStart, &dr.DataIntervalEnd: c.DataIntervalEnd} {
		if src != nil {
			*dst = *src
		}
	}
	return Render(c.Template, Values(ti, dr), c.Conf)
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
	for _, n := range Names {
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
