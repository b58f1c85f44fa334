// Package jinja renders the part of Jinja a Go task's templates may use:
// {{ name }} substitutions of Airflow's template context, rendered exactly as
// Airflow 3.3's task runner renders them (get_template_context), from the
// task instance and its Dag run; everything else (filters, macros,
// statements) is refused. The bundle runtime renders templated inputs with
// it, and check tells a template it can render from one it cannot.
package jinja

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
)

// Names are the nameslow's template context a template may
// use, each rendered from the task instance and its Dag run exactly as
// Airflow 3.3's task runner renders it (get_template_context).
var Names = []string{
	"ds", "ds_nodash", "ts", "ts_nodash", "ts_nodash_with_tz", "logical_date",
	"data_interval_start", "data_interval_end", "run_id", "task_instance_key_str",
	"dag.dag_id", "task.task_id", "ti.try_number", "ti.map_index",
}

// pyTime is t as Python's str() of a pendulum DateTime ("2026-12-07
// 05:06:07+00:00"), with sep between date and time (isoformat: "T"):
// microseconds only when there are any, the offset as +00:00.
func pyTime(t time.Time, sep string) string {
	layout := "2006-01-02" + sep + "15:04:05"
	if t.Nanosecond()/1000 != 0 {
		layout += ".000000"
	}
	return t.Format(layout + "-07:00")
}

// Values are the values templates may use, for one task instance.
// Those that depend on the logical date are missing when the run has none
// (a manual run triggered without one), as in Airflow.
func Values(ti protocol.TaskInstance, dr protocol.DagRun) map[string]string {
	v := map[string]string{
		"run_id": dr.RunID, "dag.dag_id": ti.DagID, "task.task_id": ti.TaskID,
		"ti.try_number": strconv.Itoa(ti.TryNumber), "ti.map_index": strconv.Itoa(ti.MapIndex),
		"task_instance_key_str": ti.DagID + "__" + ti.TaskID + "__" + dr.RunID,
	}
	if ld := dr.LogicalDate; !ld.IsZero() {
		ds := ld.Format(time.DateOnly)
		ts := pyTime(ld, "T")
		v["ds"], v["ds_nodash"] = ds, strings.ReplaceAll(ds, "-", "")
		v["ts"], v["ts_nodash"] = ts, ld.Format("20060102T150405")
		v["ts_nodash_with_tz"] = strings.NewReplacer("-", "", ":", "").Replace(ts)
		v["logical_date"] = pyTime(ld, " ")
		v["task_instance_key_str"] = ti.DagID + "__" + ti.TaskID + "__" + v["ds_nodash"]
		v["data_interval_start"], v["data_interval_end"] = pyTimeOrNone(dr.DataIntervalStart), pyTimeOrNone(dr.DataIntervalEnd)
	}
	return v
}

func pyTimeOrNone(t time.Time) string {
	if t.IsZero() {
		return "None"
	}
	return pyTime(t, " ")
}

// Render renders tmpl with values and the run's conf; a nil values
// map only checks what tmpl uses (at registration).
func Render(tmpl string, values map[string]string, conf map[string]any) (string, error) {
	var out strings.Builder
	rest := tmpl
	for {
		open := strings.Index(rest, "{{")
		if stmt := strings.Index(rest, "{%"); stmt >= 0 && (open < 0 || stmt < open) {
			return "", fmt.Errorf("template %q: {%% ... %%} statements are not rendered for a Go task; use {{ name }} substitutions only", tmpl)
		}
		if open < 0 {
			out.WriteString(rest)
			return out.String(), nil
		}
		end := strings.Index(rest[open:], "}}")
		if end < 0 {
			return "", fmt.Errorf("template %q: an unclosed {{", tmpl)
		}
		name := strings.TrimSpace(rest[open+2 : open+end])
		v, err := templateValue(tmpl, name, values, conf)
		if err != nil {
			return "", err
		}
		out.WriteString(rest[:open])
		out.WriteString(v)
		rest = rest[open+end+2:]
	}
}

// templateValue is one {{ name }}'s value.
func templateValue(tmpl, name string, values map[string]string, conf map[string]any) (string, error) {
	key, fromConf := strings.CutPrefix(name, "params.")
	if !fromConf {
		key, fromConf = strings.CutPrefix(name, "dag_run.conf.")
	}
	known := fromConf && key != "" && !strings.ContainsAny(key, " |()[]") || containsName(name)
	switch {
	case !known:
		return "", fmt.Errorf("template %q: {{ %s }} is not rendered for a Go task; use one of %s, params.<name> or dag_run.conf.<name> (no filters or macros)", tmpl, name, strings.Join(Names, ", "))
	case values == nil:
		return "", nil
	case fromConf:
		c, ok := conf[key]
		if !ok {
			return "", final.Mark(fmt.Errorf("template %q: the run's dag_run.conf has no %q, and a Go task cannot see the Dag's param defaults; trigger the run with it, or bind the input with {param: %s} and give its default under defaults:", tmpl, key, key))
		}
		s, err := pyString(c)
		if err != nil {
			return "", final.Mark(fmt.Errorf("template %q: dag_run.conf[%q] %w", tmpl, key, err))
		}
		return s, nil
	}
	v, ok := values[name]
	if !ok {
		return "", final.Mark(fmt.Errorf("template %q: {{ %s }} is undefined for this run: it has no logical date (a manual run triggered without one), as Airflow's template context has none either", tmpl, name))
	}
	return v, nil
}

func containsName(name string) bool {
	for _, n := range Names {
		if n == name {
			return true
		}
	}
	return false
}

// pyString renders a conf value as Jinja renders it: strings as they are,
// None for null, True/False for booleans, numbers as Python prints them. A
// list or mapping renders as Python's repr, which this does not reproduce:
// it is refused.
func pyString(v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "None", nil
	case string:
		return v, nil
	case bool:
		if v {
			return "True", nil
		}
		return "False", nil
	case float32:
		return pyFloat(float64(v)), nil
	case float64:
		return pyFloat(v), nil
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return fmt.Sprint(v), nil
	}
	return "", fmt.Errorf("is a %s, which Jinja renders as Python's repr; bind the input to it directly ({param: <name>})", kindOf(v))
}

// pyFloat is Python's repr of a float: the shortest form, with ".0" on a
// whole number.
func pyFloat(f float64) string {
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eIN") {
		s += ".0"
	}
	return s
}

// Check says whether tmpl can be rendered, without values.
func Check(tmpl string) error {
	_, err := Render(tmpl, nil, nil)
	return err
}

// kindOf names a JSON value's kind for messages.
func kindOf(v any) string {
	switch v.(type) {
	case map[string]any:
		return "mapping"
	case []any:
		return "list"
	}
	return fmt.Sprintf("%T", v)
}
