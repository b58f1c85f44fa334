package bundles

import (
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

type handoffIn struct {
	Sandbox string         `json:"sandbox"`
	Note    string         `json:"note"`
	Timeout int            `json:"timeout"`
	Command string         `json:"command"`
	Record  map[string]any `json:"record"`
}

// xcomStore answers GetXCom from a map keyed "task_id/key" and records
// every request, so a test can tell which XComs the runtime read.
type xcomStore struct {
	values map[string]any
	asked  []string
}

func (x *xcomStore) reply(m protocol.Message) (map[string]any, map[string]any) {
	if m.Type() != protocol.TypeGetXCom {
		return nil, nil
	}
	k := m.Body["task_id"].(string) + "/" + m.Body["key"].(string)
	x.asked = append(x.asked, k)
	return map[string]any{"type": "XComResult", "key": m.Body["key"], "value": x.values[k]}, nil
}

// runHandoff registers one task with opts, runs it with conf and
// arg_bindings, and returns what the body got (nil when it never ran).
func runHandoff(t *testing.T, x *xcomStore, conf map[string]any, args []protocol.ArgBinding, opts ...TaskOption) (*handoffIn, session) {
	t.Helper()
	var got *handoffIn
	b := New()
	b.Register("pipe", "collect", func(in handoffIn) error { got = &in; return nil }, opts...)
	s := runFake(t, b, startupFrame(t, "pipe", "collect", func(sd *protocol.StartupDetails) {
		sd.DagRun.Conf = conf
		sd.ArgBindings = args
	}), x.reply, serveConfig{})
	if s.err != nil {
		t.Fatal(s.err)
	}
	return got, s
}

// Airflow 3.3 drops a stub call's arguments: the XCom binding alone must
// give collect its sandbox, read with GetXCom of the upstream task.
func TestXComBindingWithoutArgBindings(t *testing.T) {
	x := &xcomStore{values: map[string]any{"provision/return_value": "sb-1", "provision/sandbox": map[string]any{"id": "sb-1"}}}
	got, s := runHandoff(t, x, nil, nil, WithXCom("sandbox", "provision"), WithXComKey("record", "provision", "sandbox"))
	if s.terminal == nil || s.terminal.Type() != protocol.TypeSucceedTask || got == nil {
		t.Fatalf("want success, got %+v", s.terminal)
	}
	if got.Sandbox != "sb-1" || got.Record["id"] != "sb-1" {
		t.Fatalf("bound %+v, want the provision task's return_value and its sandbox XCom", got)
	}
	if strings.Join(x.asked, ",") != "provision/return_value,provision/sandbox" {
		t.Fatalf("GetXCom requests = %v", x.asked)
	}
}

// On Airflow 3.4 the stub call's argument arrives as an arg_binding; it
// wins, and the bound XCom is not read a second time.
func TestArgBindingBeatsInputBinding(t *testing.T) {
	x := &xcomStore{values: map[string]any{"provision/return_value": "sb-bound", "other/return_value": "sb-passed"}}
	got, s := runHandoff(t, x, nil, []protocol.ArgBinding{{Name: "sandbox", Kind: "xcom", TaskID: "other"}}, WithXCom("sandbox", "provision"))
	if s.terminal.Type() != protocol.TypeSucceedTask || got.Sandbox != "sb-passed" {
		t.Fatalf("want the passed argument, got %+v / %+v", got, s.terminal)
	}
	if strings.Join(x.asked, ",") != "other/return_value" {
		t.Fatalf("GetXCom requests = %v, want only the passed argument's", x.asked)
	}
}

// Precedence: a param binding beats the conf allowlist and the defaults;
// an unset param leaves the input to them.
func TestParamAndConfPrecedence(t *testing.T) {
	opts := []TaskOption{
		WithDefaults(map[string]any{"note": "default", "timeout": 5, "command": "true"}),
		WithParam("note", "run_note"), AllowConf("timeout", "note"),
	}
	x := &xcomStore{}
	got, _ := runHandoff(t, x, map[string]any{"run_note": "from param", "note": "from conf", "timeout": 9, "unrelated": 1}, nil, opts...)
	if got == nil || got.Note != "from param" || got.Timeout != 9 || got.Command != "true" {
		t.Fatalf("bound %+v", got)
	}
	got, _ = runHandoff(t, x, map[string]any{"note": "from conf"}, nil, opts...)
	if got == nil || got.Note != "from conf" || got.Timeout != 5 {
		t.Fatalf("an unset param must leave note to conf, then defaults: %+v", got)
	}
	got, _ = runHandoff(t, x, nil, []protocol.ArgBinding{{Name: "note", Kind: "literal", Value: "passed"}}, opts...)
	if got == nil || got.Note != "passed" {
		t.Fatalf("a passed argument must beat everything: %+v", got)
	}
}

// The trust rule: dag_run.conf sets nothing by default, and a conf key that
// names an input fails the task before its body runs or anything is read,
// saying which key and how to allow it.
func TestConfSetsNothingByDefault(t *testing.T) {
	for _, conf := range []map[string]any{
		{"sandbox": "sb-of-another-run"},
		{"Sandbox": "sb-of-another-run"}, // folded like every binding
		{"command": "cat /etc/shadow", "note": "x"},
	} {
		x := &xcomStore{values: map[string]any{"provision/return_value": "sb-1"}}
		got, s := runHandoff(t, x, conf, nil, WithXCom("sandbox", "provision"), AllowConf("note"))
		if got != nil {
			t.Fatalf("conf %v: the body ran with %+v", conf, got)
		}
		if s.terminal == nil || s.terminal.Type() != protocol.TypeTaskState || s.terminal.Body["state"] != "failed" {
			t.Fatalf("conf %v: want failed, got %+v", conf, s.terminal)
		}
		if len(x.asked) != 0 || len(s.requests) != 0 {
			t.Fatalf("conf %v: nothing may be read before refusing, got %v", conf, s.requests)
		}
		reason := strings.Join(s.logEvents(), "\n")
		for _, l := range s.logs {
			if e, _ := l["error"].(string); e != "" {
				reason += "\n" + e
			}
		}
		for k := range conf {
			if k == "note" {
				continue
			}
			if !strings.Contains(reason, `"`+k+`"`) {
				t.Errorf("conf %v: the error must name key %q: %s", conf, k, reason)
			}
		}
		if !strings.Contains(reason, "conf: [") || !strings.Contains(reason, "dags.pipe.tasks.collect") || !strings.Contains(reason, "bundles.AllowConf(") {
			t.Errorf("conf %v: the error must say how to allow the key: %s", conf, reason)
		}
	}
	// Keys naming no input are someone else's: ignored.
	got, s := runHandoff(t, &xcomStore{values: map[string]any{"provision/return_value": "sb-1"}}, map[string]any{"other_task_key": 1}, nil, WithXCom("sandbox", "provision"))
	if got == nil || s.terminal.Type() != protocol.TypeSucceedTask {
		t.Fatalf("an unrelated conf key must be ignored, got %+v", s.terminal)
	}
}

func TestXComBindingNotFound(t *testing.T) {
	got, s := runHandoff(t, &xcomStore{}, nil, nil, WithXCom("sandbox", "provision"))
	if got != nil || s.terminal.Type() != protocol.TypeTaskState {
		t.Fatalf("want failed before the body, got %+v", s.terminal)
	}
	found := false
	for _, l := range s.logs {
		if e, _ := l["error"].(string); strings.Contains(e, `input "sandbox" is bound to {xcom: provision}, but task "provision" pushed no return_value XCom in this run`) {
			found = true
		}
	}
	if !found {
		t.Fatalf("the log must say which binding found nothing: %v", s.logs)
	}
}

func TestInputSourcesValidated(t *testing.T) {
	fn := func(handoffIn) error { return nil }
	for _, tc := range []struct {
		fn   any
		opts []TaskOption
		want string
	}{
		{fn, []TaskOption{WithXCom("sandboxx", "provision")}, `input "sandboxx" (bound to {xcom: provision}) matches no input field`},
		{fn, []TaskOption{WithXCom("sandbox", "bad id!")}, `xcom "bad id!" is not a task id`},
		{fn, []TaskOption{WithXComKey("sandbox", "provision", "")}, "the XCom key is empty"},
		{fn, []TaskOption{WithParam("sandbox", "")}, "give {xcom: <upstream task_id>}, {param: <name>}"},
		{fn, []TaskOption{WithXCom("sandbox", "a"), WithParam("Sandbox", "s")}, `input "sandbox" is bound twice ({xcom: a} and {param: s})`},
		{fn, []TaskOption{AllowConf("timeout", "imagee")}, `conf lists "imagee", which matches no input field`},
		{func() error { return nil }, []TaskOption{AllowConf("x")}, "need an input struct"},
	} {
		err := New().Add("d", "t", tc.fn, tc.opts...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want error containing %q, got %v", tc.want, err)
		}
	}
}
