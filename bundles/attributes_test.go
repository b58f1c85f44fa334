package bundles

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/cleanup"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// requestsOf lists the bodies of the requests of one type, in order.
func (s session) requestsOf(typ string) []map[string]any {
	var out []map[string]any
	for _, r := range s.requests {
		if r.Type() == typ {
			out = append(out, r.Body)
		}
	}
	return out
}

// xcomsPushed lists the SetXCom keys, in order.
func (s session) xcomsPushed() []string {
	var keys []string
	for _, b := range s.requestsOf(protocol.TypeSetXCom) {
		keys = append(keys, b["key"].(string))
	}
	return keys
}

// A task past its execution timeout is cancelled like a task Airflow sent
// SIGTERM: its cleanup runs within the grace, and it fails naming
// execution_timeout, retried when Airflow has retries left.
func TestExecutionTimeoutCancelsTheTaskAndRetries(t *testing.T) {
	cleaned := false
	s := runOne(t, func(ctx context.Context) error {
		<-ctx.Done() // a sandbox command the context stops
		cctx, cancel := cleanup.Context(ctx, time.Minute)
		defer cancel()
		cleaned = cctx.Err() == nil // the sandbox is destroyed under this
		return ctx.Err()
	}, func(sd *protocol.StartupDetails) { sd.ShouldRetry = true }, nil, WithExecutionTimeout(30*time.Millisecond))
	if !cleaned {
		t.Fatal("the task's cleanup context was already over: cleanup after a timeout must get the cancel grace")
	}
	if s.terminal.Type() != protocol.TypeRetryTask {
		t.Fatalf("terminal %v, want RetryTask: a timed-out task is retried like a Python task's AirflowTaskTimeout", s.terminal.Body)
	}
	if reason, _ := s.terminal.Body["retry_reason"].(string); !strings.Contains(reason, "execution_timeout of 30ms") {
		t.Fatalf("retry_reason %q does not name the execution_timeout", reason)
	}
}

// Without retries left the task fails, and a task that ignores its context
// is reported failed once the grace is over, still naming the timeout.
func TestExecutionTimeoutFailsATaskThatIgnoresItsContext(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	b := New()
	b.Register("d", "t", func(context.Context) error { <-release; return nil }, WithExecutionTimeout(20*time.Millisecond))
	s := runFake(t, b, startupFrame(t, "d", "t", nil), nil, serveConfig{cancelGrace: 100 * time.Millisecond, cleanupReserve: 50 * time.Millisecond})
	if s.err != nil {
		t.Fatal(s.err)
	}
	if s.terminal == nil || s.terminal.Type() != protocol.TypeTaskState || s.terminal.Body["state"] != "failed" {
		t.Fatalf("terminal %v, want TaskState failed", s.terminal)
	}
	found := false
	for _, l := range s.logs {
		if strings.Contains(fmt.Sprint(l["error"]), "execution_timeout of 20ms") || strings.Contains(fmt.Sprint(l["cause"]), "execution_timeout of 20ms") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no log line names the execution_timeout: %v", s.logEvents())
	}
}

// A task that finishes in time is untouched by its timeout.
func TestExecutionTimeoutLeavesAQuickTaskAlone(t *testing.T) {
	s := runOne(t, func(context.Context) (string, error) { return "done", nil }, nil, nil, WithExecutionTimeout(time.Hour))
	if s.terminal.Type() != protocol.TypeSucceedTask {
		t.Fatalf("terminal %v, want SucceedTask", s.terminal.Body)
	}
}

func TestTimedOutKeepsTheTasksOwnErrorInTheMessage(t *testing.T) {
	cause := &executionTimeoutError{timeout: time.Second}
	got := timedOut(outcome{err: errors.New("sandbox exec: killed")}, cause)
	if !errors.As(got.err, &cause) || !strings.Contains(got.err.Error(), "sandbox exec: killed") {
		t.Fatalf("%v", got.err)
	}
	if got := timedOut(outcome{}, cause); got.err == nil {
		t.Fatal("a task that returned success after its timeout fired must still fail")
	}
	other := errors.New("received terminated")
	if got := timedOut(outcome{err: context.Canceled}, other); got.err != context.Canceled {
		t.Fatalf("another cause must leave the outcome alone, got %v", got.err)
	}
}

type summary struct {
	Rows  int    `json:"rows"`
	Table string `json:"table"`
}

// multiple_outputs pushes each key as its own XCom before return_value, as
// Airflow's task runner does.
func TestMultipleOutputsPushEachKey(t *testing.T) {
	s := runOne(t, func() (summary, error) { return summary{Rows: 3, Table: "t1"}, nil }, nil, nil, WithMultipleOutputs())
	if got := s.xcomsPushed(); !reflect.DeepEqual(got, []string{"rows", "table", "return_value"}) {
		t.Fatalf("pushed %v", got)
	}
	if v := s.requestsOf(protocol.TypeSetXCom)[0]["value"]; fmt.Sprint(v) != "3" {
		t.Fatalf("rows = %v", v)
	}
}

func TestMultipleOutputsRefuseANonMapping(t *testing.T) {
	s := runOne(t, func() ([]int, error) { return []int{1}, nil }, func(sd *protocol.StartupDetails) { sd.ShouldRetry = true }, nil, WithMultipleOutputs())
	if s.terminal.Type() != protocol.TypeTaskState || s.terminal.Body["state"] != "failed" {
		t.Fatalf("terminal %v, want failed without retry", s.terminal.Body)
	}
	if len(s.xcomsPushed()) != 0 {
		t.Fatalf("pushed %v", s.xcomsPushed())
	}
}

func TestAttributesNeedAReturnValue(t *testing.T) {
	for _, opt := range []TaskOption{WithMultipleOutputs(), WithBranch("a")} {
		err := New().Add("d", "t", func() error { return nil }, opt)
		if err == nil || !strings.Contains(err.Error(), "returns only error") {
			t.Fatalf("%v", err)
		}
	}
	for _, c := range []struct {
		opts []TaskOption
		want string
	}{
		{[]TaskOption{WithBranch("a", "a")}, "listed twice"},
		{[]TaskOption{WithBranch("a b")}, "not a task id"},
		{[]TaskOption{WithBranchJoin("j", "a")}, "needs a branch"},
		{[]TaskOption{WithBranch("a"), WithBranchJoin("j", "a")}, `"j" is not one of`},
		{[]TaskOption{WithBranch("a", "j"), WithBranchJoin("j", "x")}, `"x" must be another`},
		{[]TaskOption{WithExecutionTimeout(-time.Second)}, "negative"},
	} {
		err := New().Add("d", "t", func() (string, error) { return "", nil }, c.opts...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, want %q", err, c.want)
		}
	}
}

type runOutput struct{ last string }

func (r runOutput) FollowTasks() []string { return strings.Fields(r.last) }

// A branch has Airflow skip the downstream tasks it did not choose, leaves
// the XCom Airflow's NotPreviouslySkippedDep reads, and, like Python's
// branch that skips, pushes no return_value.
func TestBranchSkipsTheUnchosen(t *testing.T) {
	for _, c := range []struct {
		name     string
		fn       any
		opts     []TaskOption
		follow   []any
		skip     []any
		returned bool
	}{
		{"one", func() (string, error) { return "load", nil }, []TaskOption{WithBranch("load", "report", "cleanup")},
			[]any{"load"}, []any{[]any{"report", int64(-1)}, []any{"cleanup", int64(-1)}}, false},
		{"several", func() ([]string, error) { return []string{"load", "report"}, nil }, []TaskOption{WithBranch("load", "report", "cleanup")},
			[]any{"load", "report"}, []any{[]any{"cleanup", int64(-1)}}, false},
		{"none", func() (any, error) { return nil, nil }, []TaskOption{WithBranch("load", "report")},
			[]any{}, []any{[]any{"load", int64(-1)}, []any{"report", int64(-1)}}, false},
		{"join", func() (string, error) { return "load", nil }, []TaskOption{WithBranch("load", "join"), WithBranchJoin("join", "load")},
			[]any{"load", "join"}, nil, true},
		{"join not reached", func() (string, error) { return "join", nil }, []TaskOption{WithBranch("load", "join"), WithBranchJoin("join", "load")},
			[]any{"join"}, []any{[]any{"load", int64(-1)}}, false},
		{"follower", func() (runOutput, error) { return runOutput{last: "report"}, nil }, []TaskOption{WithBranch("load", "report")},
			[]any{"report"}, []any{[]any{"load", int64(-1)}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := runOne(t, c.fn, nil, nil, c.opts...)
			if s.terminal.Type() != protocol.TypeSucceedTask {
				t.Fatalf("terminal %v", s.terminal.Body)
			}
			pushed := s.requestsOf(protocol.TypeSetXCom)
			if len(pushed) == 0 || pushed[0]["key"] != skipMixinKey {
				t.Fatalf("pushed %v, want %s first", s.xcomsPushed(), skipMixinKey)
			}
			if got := pushed[0]["value"].(map[string]any)[skipMixinFollowed]; !reflect.DeepEqual(got, c.follow) {
				t.Fatalf("followed %#v, want %#v", got, c.follow)
			}
			skips := s.requestsOf(protocol.TypeSkipDownstreamTasks)
			switch {
			case c.skip == nil && len(skips) != 0:
				t.Fatalf("skipped %v, want nothing", skips)
			case c.skip != nil && (len(skips) != 1 || !reflect.DeepEqual(skips[0]["tasks"], c.skip)):
				t.Fatalf("SkipDownstreamTasks %v, want one with %v", skips, c.skip)
			}
			if got := len(pushed) == 2 && pushed[1]["key"] == "return_value"; got != c.returned {
				t.Fatalf("return_value pushed: %v (xcoms %v), want %v", got, s.xcomsPushed(), c.returned)
			}
		})
	}
}

// A mapped branch instance skips nothing itself (the scheduler does, from
// the XCom), and so pushes its return value, as Airflow's SkipMixin does.
func TestMappedBranchLeavesSkippingToTheScheduler(t *testing.T) {
	s := runOne(t, func(in mappedIn) (string, error) { return "load", nil },
		func(sd *protocol.StartupDetails) { sd.TI.MapIndex = 2 }, nil, WithBranch("load", "report"), WithExpandItems("url", "a", "b", "c"))
	if len(s.requestsOf(protocol.TypeSkipDownstreamTasks)) != 0 {
		t.Fatal("a mapped instance must not skip")
	}
	if got := s.xcomsPushed(); !reflect.DeepEqual(got, []string{skipMixinKey, "return_value"}) {
		t.Fatalf("pushed %v", got)
	}
}

func TestBranchRefusesATaskItDoesNotLead(t *testing.T) {
	s := runOne(t, func() (string, error) { return "elsewhere", nil }, func(sd *protocol.StartupDetails) { sd.ShouldRetry = true }, nil, WithBranch("load"))
	if s.terminal.Type() != protocol.TypeTaskState || s.terminal.Body["state"] != "failed" {
		t.Fatalf("terminal %v, want failed without retry", s.terminal.Body)
	}
	if len(s.requestsOf(protocol.TypeSkipDownstreamTasks)) != 0 || len(s.xcomsPushed()) != 0 {
		t.Fatal("a refused choice must skip and push nothing")
	}
	s = runOne(t, func() (int, error) { return 3, nil }, nil, nil, WithBranch("load"))
	if s.terminal.Body["state"] != "failed" {
		t.Fatalf("terminal %v, want failed: 3 names no task", s.terminal.Body)
	}
}

type mappedIn struct {
	URL string `json:"url"`
}

// Airflow 3.3 hands a mapped executable task no element: an instance of a
// task that binds none (.expand_kwargs, an input the bundle does not map)
// fails at once instead of succeeding on its defaults.
func TestAMappedInstanceNeedsAnElement(t *testing.T) {
	ran := false
	mapped := func(sd *protocol.StartupDetails) { sd.TI.MapIndex = 1; sd.ShouldRetry = true }
	s := runOne(t, func(in mappedIn) (string, error) { ran = true; return in.URL, nil }, mapped, nil,
		WithDefaults(map[string]any{"url": "s3://b/default"}))
	if ran {
		t.Fatal("the task ran with its defaults")
	}
	if s.terminal.Body["state"] != "failed" {
		t.Fatalf("terminal %v, want failed without retry", s.terminal.Body)
	}
	found := false
	for _, l := range s.logs {
		if e, _ := l["error"].(string); strings.Contains(e, "map_index 1") && strings.Contains(e, "expand_kwargs") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no log line says what to write: %v", s.logs)
	}
	// A task that maps over an input runs; one that only reads its map
	// index (its TaskInstance) is refused like the rest: the index names
	// the instance, it does not say what to process.
	s = runOne(t, func(in mappedIn) (string, error) { return in.URL, nil }, mapped, nil, WithExpandItems("url", "a", "b"))
	if s.terminal.Type() != protocol.TypeSucceedTask {
		t.Fatalf("expanding task: %v", s.terminal.Body)
	}
	ran = false
	s = runOne(t, func(ti TaskInstance) (int, error) { ran = true; return ti.MapIndex, nil }, mapped, nil)
	if ran || s.terminal.Body["state"] != "failed" {
		t.Fatalf("a task reading only its map index: ran %v, terminal %v; want failed before it ran", ran, s.terminal.Body)
	}
}

// GetAssetEvents is Python's inlet_events[asset]: GetAssetEventByAsset,
// oldest first, the latest few when limited.
func TestGetAssetEventsAsksByAsset(t *testing.T) {
	var got []AssetEvent
	reply := func(m protocol.Message) (map[string]any, map[string]any) {
		if m.Type() != protocol.TypeGetAssetEventByAsset {
			return nil, nil
		}
		event := func(id int, ts string) map[string]any {
			return map[string]any{"id": id, "timestamp": ts, "asset": map[string]any{"name": "orders", "uri": "s3://b/orders", "extra": map[string]any{}},
				"extra": map[string]any{"n": id}, "created_dagruns": []any{}, "source_dag_id": "producer", "source_run_id": "r", "source_task_id": "t"}
		}
		// Newest first, as Airflow answers a descending query.
		return map[string]any{"type": protocol.TypeAssetEventsResult, "asset_events": []any{event(2, "2026-12-07T10:00:00Z"), event(1, "2026-12-06T10:00:00Z")}}, nil
	}
	s := runOne(t, func(ctx context.Context, c Client) error {
		var err error
		got, err = c.GetAssetEvents(ctx, Asset{URI: "s3://b/orders"}, 2)
		return err
	}, nil, reply)
	if s.terminal.Type() != protocol.TypeSucceedTask {
		t.Fatalf("terminal %v", s.terminal.Body)
	}
	reqs := s.requestsOf(protocol.TypeGetAssetEventByAsset)
	if len(reqs) != 1 || reqs[0]["uri"] != "s3://b/orders" || reqs[0]["name"] != nil || fmt.Sprint(reqs[0]["limit"]) != "2" || reqs[0]["ascending"] != false {
		t.Fatalf("requests %v", reqs)
	}
	if len(got) != 2 || got[0].Extra["n"] != 1.0 && fmt.Sprint(got[0].Extra["n"]) != "1" || got[1].SourceDagID != "producer" {
		t.Fatalf("events %+v, want oldest first", got)
	}
}
