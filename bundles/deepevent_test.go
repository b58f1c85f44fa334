package bundles

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// nested is a map nesting levels deep: {"a": {"a": ... "end"}}.
func nested(levels int) any {
	var v any = "end"
	for range levels {
		v = map[string]any{"a": v}
	}
	return v
}

// Issue 38, item 3: an asset event whose extra nests 200 levels failed
// every Go task of the run it triggered before it started ("first frame:
// malformed frame: msgpack nesting deeper than 128 levels"), even tasks
// that bind nothing from it; a Python task given the same event runs.
// Now only a task binding into the part the runtime cannot read fails,
// naming the event and why. (Before the fix all three cases failed with
// the protocol error.)
func TestADeepEventExtraFailsOnlyTheTasksThatBindIntoIt(t *testing.T) {
	withDeepEvent := func(sd *protocol.StartupDetails) {
		ev := events(time.Now())
		ev[0].Extra["deep"] = nested(200)
		sd.DagRun.TriggeringAssetEvents = ev
	}
	type in struct {
		URL  string `json:"url"`
		Deep any    `json:"deep"`
	}
	var ran []string
	b := New()
	b.Register("d", "unbound", func(dr DagRun) error {
		ran = append(ran, "unbound")
		if _, cut := protocol.FindTooDeep(dr.TriggeringAssetEvents[0].Extra); !cut {
			return errors.New("the task should see where the extra was cut")
		}
		return nil
	})
	b.Register("d", "shallow", func(in in) error { ran = append(ran, "shallow"); return nil },
		WithAssetEvent("url", "s3://bucket/incoming/", "extra.url"))
	b.Register("d", "deep", func(in in) error { ran = append(ran, "deep"); return nil },
		WithAssetEvent("deep", "s3://bucket/incoming/", "extra.deep.a.a"))
	for _, task := range []string{"unbound", "shallow", "deep"} {
		s := runFake(t, b, startupFrame(t, "d", task, withDeepEvent), nil, serveConfig{})
		if s.err != nil || s.terminal == nil {
			t.Fatalf("%s: the task did not run to an outcome: %v", task, s.err)
		}
		if task != "deep" {
			if s.terminal.Type() != protocol.TypeSucceedTask {
				t.Errorf("%s: want it to succeed, got %v", task, s.terminal.Body)
			}
			continue
		}
		failure := strings.Join(s.logEvents(), "\n") + " " + strings.TrimSpace(strings.Join(errorsOf(s), " "))
		if s.terminal.Body["state"] != "failed" || !strings.Contains(failure, `the triggering event of Asset("s3://bucket/incoming/") (from producer/manual__1) cannot give extra.deep.a.a: its extra nests deeper than a frame may (128 levels)`) {
			t.Errorf("deep: want it failed naming the event and why, got %v\n%s", s.terminal.Body, failure)
		}
	}
	if strings.Join(ran, ",") != "unbound,shallow" {
		t.Fatalf("ran %v, want the two tasks that do not bind into the cut part", ran)
	}
}

// errorsOf are the error fields of a session's log records.
func errorsOf(s session) []string {
	var out []string
	for _, l := range s.logs {
		if e, ok := l["error"].(string); ok {
			out = append(out, e)
		}
	}
	return out
}
