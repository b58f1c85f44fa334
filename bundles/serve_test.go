package bundles

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
	"github.com/airflow-sandbox/airflow-go-worker/connections"
)

type greetIn struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
	Tags  []string
	Dur   time.Duration `json:"dur"`
}

type greetOut struct {
	Text string `json:"text"`
}

func testBundle() *Bundle {
	b := New()
	b.Register("d", "greet", func(ctx context.Context, in greetIn) (greetOut, error) {
		return greetOut{Text: strings.Repeat(in.Name, in.Count) + "|" + strings.Join(in.Tags, ",")}, nil
	}, WithDefaults(map[string]any{"name": "def", "count": 1}), AllowConf("count"))
	b.Register("d", "fail", func() error { return errors.New("boom") })
	b.Register("d", "panic", func() error { panic("kaboom") })
	b.Register("d", "nilptr", func() (*greetOut, error) { return nil, nil })
	b.Register("d", "errval", func() (greetOut, error) { return greetOut{Text: "x"}, errors.New("both") })
	return b
}

func TestServeSuccessPushesReturnValue(t *testing.T) {
	s := runFake(t, testBundle(), startupFrame(t, "d", "greet", func(sd *protocol.StartupDetails) {
		sd.DagRun.Conf = map[string]any{"Count": 2, "unrelated": true}
		sd.ArgBindings = []protocol.ArgBinding{{Name: "name", Kind: "literal", Value: "ab"}, {Name: "tags", Kind: "literal", Value: []any{"x", "y"}}}
	}), nil, serveConfig{})
	if s.err != nil {
		t.Fatal(s.err)
	}
	if len(s.requests) != 1 || s.requests[0].Type() != "SetXCom" {
		t.Fatalf("want exactly one SetXCom, got %+v", s.requests)
	}
	x := s.requests[0].Body
	if x["key"] != "return_value" || x["task_id"] != "greet" || x["dag_id"] != "d" || x["run_id"] != "manual__2026-11-29" {
		t.Fatalf("SetXCom target wrong: %v", x)
	}
	if _, has := x["map_index"]; has {
		t.Fatalf("map_index must be omitted for an unmapped task: %v", x)
	}
	if v, _ := x["value"].(map[string]any); v["text"] != "abab|x,y" {
		t.Fatalf("arg_bindings beat conf beat defaults; got value %v", x["value"])
	}
	term := s.terminal
	if term == nil || term.Type() != "SucceedTask" {
		t.Fatalf("want SucceedTask, got %+v", term)
	}
	if _, ok := term.Body["end_date"].(time.Time); !ok {
		t.Fatalf("end_date must be a msgpack timestamp, got %T", term.Body["end_date"])
	}
	for _, k := range []string{"task_outlets", "outlet_events"} {
		if l, ok := term.Body[k].([]any); !ok || len(l) != 0 {
			t.Fatalf("%s must be an empty list, got %#v", k, term.Body[k])
		}
	}
}

func TestServeOutcomes(t *testing.T) {
	cases := []struct {
		task, wantType, wantState, wantReason string
		retry                                 bool
	}{
		{"fail", "TaskState", "failed", "", false},
		{"fail", "RetryTask", "", "boom", true},
		{"panic", "RetryTask", "", "panic: kaboom", true},
		{"no_such_task", "TaskState", "removed", "", true},
		{"nilptr", "SucceedTask", "", "", false},
		{"errval", "TaskState", "failed", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.task, func(t *testing.T) {
			s := runFake(t, testBundle(), startupFrame(t, "d", tc.task, func(sd *protocol.StartupDetails) { sd.ShouldRetry = tc.retry }), nil, serveConfig{})
			if s.err != nil {
				t.Fatal(s.err)
			}
			if s.terminal == nil || s.terminal.Type() != tc.wantType {
				t.Fatalf("want %s, got %+v", tc.wantType, s.terminal)
			}
			if st, _ := s.terminal.Body["state"].(string); st != tc.wantState {
				t.Fatalf("state = %q, want %q", st, tc.wantState)
			}
			if tc.wantReason != "" && s.terminal.Body["retry_reason"] != tc.wantReason {
				t.Fatalf("retry_reason = %v, want %q", s.terminal.Body["retry_reason"], tc.wantReason)
			}
			if len(s.requests) != 0 {
				t.Fatalf("no XCom may be pushed here, got %+v", s.requests)
			}
		})
	}
	s := runFake(t, testBundle(), startupFrame(t, "d", "panic", nil), nil, serveConfig{})
	found := false
	for _, l := range s.logs {
		if l["event"] == "task panicked" && strings.Contains(l["stack"].(string), "goroutine") {
			found = true
		}
	}
	if !found {
		t.Fatalf("the panic's stack must be logged; logs: %v", s.logEvents())
	}
}

// Inputs that cannot be bound fail the task before its body runs, and
// finally: the same inputs bind the same way on every try. Only an XCom
// read that failed for another reason than a missing XCom is retried.
func TestServeBindingErrorsFailBeforeBody(t *testing.T) {
	notFound := func(m protocol.Message) (map[string]any, map[string]any) {
		return map[string]any{"type": "XComResult", "key": "return_value", "value": nil}, nil
	}
	for _, tc := range []struct {
		bindings []protocol.ArgBinding
		conf     map[string]any
		reply    replyFunc
		retry    bool
		want     string
	}{
		{[]protocol.ArgBinding{{Name: "nope", Kind: "literal", Value: 1}}, nil, notFound, false, `argument "nope" matches no input field`},
		{[]protocol.ArgBinding{{Name: "count", Kind: "literal", Value: "many"}}, nil, notFound, false, `input field "count" from argument "count"`},
		{nil, map[string]any{"count": "many"}, notFound, false, `input field "count" from dag_run.conf["count"]`},
		{[]protocol.ArgBinding{{Name: "name", Kind: "weird"}}, nil, notFound, false, `unknown binding kind "weird"`},
		{[]protocol.ArgBinding{{Name: "name", Kind: "xcom", TaskID: "up"}}, nil, notFound, false, `upstream task "up" pushed no return_value in this run (did it fail or get skipped?)`},
		{[]protocol.ArgBinding{{Name: "name", Kind: "xcom", TaskID: "up"}}, nil, func(m protocol.Message) (map[string]any, map[string]any) {
			return nil, map[string]any{"error": "API_SERVER_ERROR", "detail": map[string]any{"status_code": 503}}
		}, true, `reading return_value of upstream task "up"`},
	} {
		ran := false
		b := New()
		b.Register("d", "greet", func(in struct {
			Name  string `json:"name"`
			Count int    `json:"count"`
		}) error {
			ran = true
			return nil
		}, AllowConf("count"))
		s := runFake(t, b, startupFrame(t, "d", "greet", func(sd *protocol.StartupDetails) {
			sd.ShouldRetry = true
			sd.ArgBindings = tc.bindings
			sd.DagRun.Conf = tc.conf
		}), tc.reply, serveConfig{})
		if ran {
			t.Errorf("%s: the task body ran", tc.want)
		}
		if tc.retry {
			if s.terminal == nil || s.terminal.Type() != "RetryTask" {
				t.Fatalf("%s: want RetryTask, got %+v", tc.want, s.terminal)
			}
			if r, _ := s.terminal.Body["retry_reason"].(string); !strings.Contains(r, tc.want) {
				t.Errorf("retry_reason %q should contain %q", r, tc.want)
			}
			continue
		}
		if s.terminal == nil || s.terminal.Type() != "TaskState" || s.terminal.Body["state"] != "failed" {
			t.Fatalf("%s: want TaskState failed although retries are left, got %+v", tc.want, s.terminal)
		}
		logged := false
		for _, l := range s.logs {
			logged = logged || strings.Contains(fmt.Sprint(l["error"]), tc.want) && strings.Contains(fmt.Sprint(l["event"]), "not retried")
		}
		if !logged {
			t.Errorf("%s: the log must give the reason and say it is not retried: %v", tc.want, s.logs)
		}
	}
}

func TestServeXComBinding(t *testing.T) {
	s := runFake(t, testBundle(), startupFrame(t, "d", "greet", func(sd *protocol.StartupDetails) {
		sd.ArgBindings = []protocol.ArgBinding{{Name: "name", Kind: "xcom", TaskID: "up"}}
	}), func(m protocol.Message) (map[string]any, map[string]any) {
		if m.Type() == "GetXCom" {
			if m.Body["task_id"] != "up" || m.Body["key"] != "return_value" {
				t.Errorf("GetXCom asks for the wrong thing: %v", m.Body)
			}
			return map[string]any{"type": "XComResult", "key": "return_value", "value": "up!"}, nil
		}
		return nil, nil
	}, serveConfig{})
	if s.terminal == nil || s.terminal.Type() != "SucceedTask" {
		t.Fatalf("want success, got %+v", s.terminal)
	}
	if v := s.requests[1].Body["value"].(map[string]any)["text"]; v != "up!|" {
		t.Fatalf("xcom binding not applied, got %v", v)
	}
}

func TestServeCancelGrace(t *testing.T) {
	// The task ignores cancellation; the runtime must report it failed once
	// the grace period is over, rather than hang.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := New()
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	b.Register("d", "stubborn", func(context.Context) error {
		cancel()
		<-block
		return nil
	})
	s := runFakeWith(t, b, startupFrame(t, "d", "stubborn", nil), nil, serveConfig{cancelGrace: 50 * time.Millisecond}, ctx)
	if s.terminal == nil || s.terminal.Body["state"] != "failed" {
		t.Fatalf("want failed after grace, got %+v", s.terminal)
	}
	found := false
	for _, l := range s.logs {
		if e, _ := l["error"].(string); strings.Contains(e, "did not return within") {
			found = true
		}
	}
	if !found {
		t.Fatalf("the reason must be logged; got %v", s.logs)
	}
}

func TestServeClient(t *testing.T) {
	var gotConn connections.Connection
	var errs []error
	var varVal, envVal, emptyVal string
	emptyErr := errors.New("not called")
	var xv any
	b := New()
	b.Register("d", "client", func(ctx context.Context, c Client, g connectionGetter, log hclog.Logger) error {
		var err error
		gotConn, err = g.GetConnection(ctx, "mine")
		if err != nil {
			return err
		}
		_, err = c.GetConnection(ctx, "missing")
		errs = append(errs, err)
		_, err = c.GetConnection(ctx, "missing3")
		errs = append(errs, err)
		varVal, err = c.GetVariable(ctx, "remote")
		if err != nil {
			return err
		}
		envVal, _ = c.GetVariable(ctx, "from_env")
		emptyVal, emptyErr = c.GetVariable(ctx, "empty_env")
		_, err = c.GetVariable(ctx, "nope")
		errs = append(errs, err)
		_, err = c.GetXCom(ctx, XComRef{TaskID: "up"})
		errs = append(errs, err)
		xv, err = c.GetXCom(ctx, XComRef{TaskID: "up", Key: "k", MapIndex: new(int)})
		if err != nil {
			return err
		}
		if err := c.MaskSecret(ctx, "hunter22", "pw"); err != nil {
			return err
		}
		log.Info("the password is hunter22", "nested", map[string]any{"pw": "hunter22"})
		return nil
	})
	env := map[string]string{"AIRFLOW_VAR_FROM_ENV": "env-value", "AIRFLOW_VAR_EMPTY_ENV": ""}
	s := runFake(t, b, startupFrame(t, "d", "client", nil), func(m protocol.Message) (map[string]any, map[string]any) {
		switch m.Type() {
		case "GetConnection":
			switch m.Body["conn_id"] {
			case "mine":
				return map[string]any{"type": "ConnectionResult", "conn_id": "mine", "conn_type": "http", "port": int64(8080), "extra": `{"a":1}`}, nil
			case "missing":
				return map[string]any{"type": "ErrorResponse", "error": "CONNECTION_NOT_FOUND", "detail": nil}, nil
			}
			return nil, map[string]any{"type": "ErrorResponse", "error": "CONNECTION_NOT_FOUND"}
		case "GetVariable":
			if m.Body["key"] == "remote" {
				return map[string]any{"type": "VariableResult", "key": "remote", "value": "rv"}, nil
			}
			return map[string]any{"type": "ErrorResponse", "error": "VARIABLE_NOT_FOUND"}, nil
		case "GetXCom":
			if m.Body["key"] == "k" {
				if m.Body["map_index"] != int64(0) {
					t.Errorf("map_index 0 must be sent: %v", m.Body)
				}
				return map[string]any{"type": "XComResult", "key": "k", "value": map[string]any{"n": int64(1)}}, nil
			}
			return map[string]any{"type": "XComResult", "key": "return_value", "value": nil}, nil
		}
		return nil, nil
	}, serveConfig{lookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if s.terminal == nil || s.terminal.Type() != "SucceedTask" {
		t.Fatalf("want success, got %+v (logs %v)", s.terminal, s.logs)
	}
	if gotConn.ConnType != "http" || gotConn.Port != 8080 || gotConn.Extra != `{"a":1}` || gotConn.Host != "" {
		t.Fatalf("connection decoded wrong: %+v", gotConn)
	}
	for i, want := range []error{ErrConnectionNotFound, ErrConnectionNotFound, ErrVariableNotFound, ErrXComNotFound} {
		if !errors.Is(errs[i], want) {
			t.Errorf("error %d = %v, want %v", i, errs[i], want)
		}
	}
	if !strings.Contains(errs[0].Error(), `"missing"`) {
		t.Errorf("not-found error should name the connection: %v", errs[0])
	}
	if varVal != "rv" || envVal != "env-value" {
		t.Fatalf("variables: %q %q", varVal, envVal)
	}
	if emptyErr != nil || emptyVal != "" {
		t.Fatalf("an AIRFLOW_VAR_ set to \"\" is the value \"\", as in Airflow: got %q, %v", emptyVal, emptyErr)
	}
	for _, r := range s.requests {
		if r.Type() == "GetVariable" && (r.Body["key"] == "from_env" || r.Body["key"] == "empty_env") {
			t.Fatal("an AIRFLOW_VAR_ variable must not be asked of the supervisor")
		}
	}
	if xv.(map[string]any)["n"] != int64(1) {
		t.Fatalf("xcom value %v", xv)
	}
	var masked bool
	for _, l := range s.logs {
		line, _ := msgpack.Marshal(l)
		if strings.Contains(string(line), "hunter22") {
			t.Fatalf("secret leaked into logs: %v", l)
		}
		if l["event"] == "the password is ***" && l["nested"].(map[string]any)["pw"] == "***" {
			masked = true
		}
	}
	if !masked {
		t.Fatalf("expected a redacted log line; got %v", s.logEvents())
	}
}

func TestServeLogFilteringAndFormat(t *testing.T) {
	b := New()
	b.Register("d", "logs", func(log hclog.Logger) error {
		log.Debug("task debug")
		log.Info("task info", "rows", 3)
		log.Named("noisy").Info("noisy info")
		log.Named("noisy").Warn("noisy warning")
		log.Named("noisy").Named("deep").Debug("deep debug")
		return nil
	})
	env := map[string]string{
		"AIRFLOW__LOGGING__LOGGING_LEVEL":    "debug",
		"AIRFLOW__LOGGING__NAMESPACE_LEVELS": "task.noisy=WARNING, task.noisy.deep=DEBUG bogus",
	}
	s := runFake(t, b, startupFrame(t, "d", "logs", nil), nil, serveConfig{lookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	got := strings.Join(s.logEvents(), "|")
	for _, want := range []string{"task debug", "task info", "noisy warning", "deep debug", `ignoring "bogus"`} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in %s", want, got)
		}
	}
	if strings.Contains(got, "noisy info") {
		t.Errorf("task.noisy=WARNING should drop its info lines: %s", got)
	}
	if !strings.HasPrefix(got, "AIRFLOW__LOGGING__NAMESPACE_LEVELS") {
		t.Errorf("the start-up warning was logged before the socket connected and must come first: %s", got)
	}
	for _, l := range s.logs {
		if l["event"] == "task info" {
			if l["level"] != "info" || l["logger"] != "task" || l["rows"] != float64(3) || l["dag_id"] != "d" {
				t.Errorf("bad record %v", l)
			}
			if _, err := time.Parse(time.RFC3339Nano, l["timestamp"].(string)); err != nil {
				t.Errorf("timestamp: %v", err)
			}
		}
		if l["event"] == "noisy warning" && (l["level"] != "warning" || l["logger"] != "task.noisy") {
			t.Errorf("bad record %v", l)
		}
	}
}

func TestServeTaskHandlerParseRequest(t *testing.T) {
	ran := false
	b := New()
	b.Register("d1", "a", func(in greetIn) error { ran = true; return nil })
	b.Register("d1", "b", func() error { ran = true; return nil })
	b.Register("d2", "c", func() error { ran = true; return nil })
	first, _ := protocol.EncodeReply(0, &protocol.TaskHandlerParseRequest{File: "/bundles/x", BundlePath: "/bundles", BundleName: "dags"}, nil)
	s := runFake(t, b, first, nil, serveConfig{})
	if s.err != nil || ran {
		t.Fatalf("err=%v ran=%v", s.err, ran)
	}
	if len(s.requests) != 1 || s.requests[0].Type() != "TaskHandlerParsingResult" {
		t.Fatalf("want one TaskHandlerParsingResult, got %+v", s.requests)
	}
	body := s.requests[0].Body
	if body["fileloc"] != "/bundles/x" {
		t.Fatalf("fileloc %v", body["fileloc"])
	}
	th := body["task_handlers"].(map[string]any)
	d1 := th["d1"].([]any)
	a := d1[0].(map[string]any)
	params := a["params"].([]any)
	if a["task_id"] != "a" || a["binding"] != "named" || len(params) != 4 || params[0].(map[string]any)["name"] != "name" || params[0].(map[string]any)["exact_name"] != true {
		t.Fatalf("declaration of d1.a wrong: %v", a)
	}
	if p, ok := d1[1].(map[string]any)["params"].([]any); !ok || len(p) != 0 {
		t.Fatalf("a task without inputs declares an empty params list: %v", d1[1])
	}
	if len(th["d2"].([]any)) != 1 {
		t.Fatalf("d2: %v", th["d2"])
	}
	// With a filter that matches nothing, task_handlers is {} not null.
	first, _ = protocol.EncodeReply(0, &protocol.TaskHandlerParseRequest{File: "f", DagIDs: []string{"zzz"}}, nil)
	s = runFake(t, b, first, nil, serveConfig{})
	if th, ok := s.requests[0].Body["task_handlers"].(map[string]any); !ok || len(th) != 0 {
		t.Fatalf("empty task_handlers must be {}, got %#v", s.requests[0].Body["task_handlers"])
	}
}

func TestServeBadFirstFrames(t *testing.T) {
	sd := func(mut func(map[string]any)) []byte {
		body, err := protocol.AsRaw((protocol.StartupDetails{TI: protocol.TaskInstance{ID: "i", DagID: "d", TaskID: "t", RunID: "r", TryNumber: 1}}).Body(true))
		if err != nil {
			t.Fatal(err)
		}
		mut(body)
		p, _ := protocol.EncodeReply(0, body, nil)
		return p
	}
	errFrame, _ := protocol.EncodeReply(0, nil, &protocol.ErrorResponse{Error: "API_SERVER_ERROR"})
	cases := map[string]struct {
		frame []byte
		want  string
	}{
		"unknown type":  {must(protocol.EncodeReply(0, protocol.Raw{"type": "Hello"}, nil)), `unexpected first message type "Hello"`},
		"no type":       {must(protocol.EncodeReply(0, protocol.Raw{}, nil)), "no body type"},
		"not msgpack":   {[]byte{0xc1, 0x00}, "malformed frame"},
		"missing ti.id": {sd(func(b map[string]any) { delete(b["ti"].(map[string]any), "id") }), "ti.id is required"},
		"try zero":      {sd(func(b map[string]any) { b["ti"].(map[string]any)["try_number"] = 0 }), "try_number must be at least 1"},
		"error element": {errFrame, "first frame is an error"},
	}
	for name, tc := range cases {
		s := runFake(t, testBundle(), tc.frame, nil, serveConfig{})
		var pe *protocolError
		if !errors.As(s.err, &pe) || !strings.Contains(s.err.Error(), tc.want) {
			t.Errorf("%s: want a ProtocolError containing %q, got %v", name, tc.want, s.err)
		}
		if s.terminal != nil {
			t.Errorf("%s: no terminal frame may be sent on a protocol error", name)
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestConnectionPasswordNeverLoggedOrInRetryReason(t *testing.T) {
	b := New()
	b.Register("d", "t", func(ctx context.Context, g connectionGetter, log hclog.Logger) error {
		c, err := g.GetConnection(ctx, "db")
		if err != nil {
			return err
		}
		log.Info("connecting with " + c.Password)
		return errors.New("login failed for password " + c.Password)
	})
	s := runFake(t, b, startupFrame(t, "d", "t", func(sd *protocol.StartupDetails) { sd.ShouldRetry = true }), func(m protocol.Message) (map[string]any, map[string]any) {
		return map[string]any{"type": "ConnectionResult", "conn_id": "db", "conn_type": "postgres", "password": "topsecret-pw"}, nil
	}, serveConfig{})
	if r := s.terminal.Body["retry_reason"]; r != "login failed for password ***" {
		t.Fatalf("retry_reason %v", r)
	}
	for _, l := range s.logs {
		if strings.Contains(fmt.Sprint(l), "topsecret-pw") {
			t.Fatalf("password logged: %v", l)
		}
	}
	if !strings.Contains(strings.Join(s.logEvents(), "|"), "connecting with ***") {
		t.Fatalf("expected the redacted line: %v", s.logEvents())
	}
}

// A broken frame from the supervisor mid-task is a protocol failure: the
// task is stopped, no terminal frame is sent (there is no one to trust with
// it) and Serve returns a ProtocolError, so the process exits non-zero.
func TestServeBrokenReplyMidTaskIsAProtocolError(t *testing.T) {
	huge := make([]byte, 4)
	binary.BigEndian.PutUint32(huge, protocol.MaxFrameSize+1)
	for name, tc := range map[string]struct {
		raw  []byte
		want string
	}{
		"malformed": {[]byte{0, 0, 0, 2, 0xc1, 0xc1}, "malformed frame"},
		"oversized": {huge, "frame too large"},
		// Issue 19: a supervisor that stops mid-frame left the task
		// waiting for the reply forever.
		"stalled mid-frame": {[]byte{0, 0, 0, 100, 0x81}, "stopped sending in the middle of a frame"},
	} {
		t.Run(name, func(t *testing.T) {
			defer func(d time.Duration) { frameTimeout = d }(frameTimeout)
			frameTimeout = 100 * time.Millisecond
			b := New()
			var taskErr error
			b.Register("d", "t", func(ctx context.Context, c Client) error {
				_, err := c.GetVariable(ctx, "k")
				taskErr = err
				// A task that ignores the error must still be stopped.
				<-ctx.Done()
				return ctx.Err()
			})
			s := runFake(t, b, startupFrame(t, "d", "t", nil), func(m protocol.Message) (map[string]any, map[string]any) {
				return map[string]any{rawReplyKey: tc.raw}, nil
			}, serveConfig{cancelGrace: 5 * time.Second})
			var pe *protocolError
			if !errors.As(s.err, &pe) || !strings.Contains(s.err.Error(), tc.want) {
				t.Fatalf("want a ProtocolError containing %q, got %v", tc.want, s.err)
			}
			if s.terminal != nil {
				t.Fatalf("no terminal frame may follow a broken comm socket, got %+v", s.terminal)
			}
			if taskErr == nil || !strings.Contains(taskErr.Error(), tc.want) {
				t.Fatalf("the pending call should fail naming the cause, got %v", taskErr)
			}
		})
	}
}

// A reply of the wrong kind must be an error naming it, never a silent
// "not found" that a task could take for an absent value.
func TestServeClientRejectsRepliesOfTheWrongKind(t *testing.T) {
	var errs []error
	b := New()
	b.Register("d", "t", func(ctx context.Context, c Client) error {
		_, err := c.GetVariable(ctx, "k")
		errs = append(errs, err)
		_, err = c.GetXCom(ctx, XComRef{TaskID: "up"})
		errs = append(errs, err)
		_, err = c.GetConnection(ctx, "c")
		errs = append(errs, err)
		_, err = c.GetVariable(ctx, "empty")
		errs = append(errs, err)
		return nil
	})
	runFake(t, b, startupFrame(t, "d", "t", nil), func(m protocol.Message) (map[string]any, map[string]any) {
		if m.Body["key"] == "empty" {
			return nil, nil
		}
		return map[string]any{"type": "OKResponse", "ok": true}, nil
	}, serveConfig{})
	for i, want := range []string{`answered "OKResponse", want VariableResult`, `answered "OKResponse", want XComResult`, `answered "OKResponse", want ConnectionResult`, "empty reply, want VariableResult"} {
		if i >= len(errs) || errs[i] == nil || !strings.Contains(errs[i].Error(), want) {
			t.Errorf("call %d: got %v, want an error containing %q", i, errs, want)
			continue
		}
		if errors.Is(errs[i], ErrVariableNotFound) || errors.Is(errs[i], ErrXComNotFound) {
			t.Errorf("call %d: a wrong reply is not a not-found: %v", i, errs[i])
		}
	}
}

// A result body without "type" (exclude_unset) is still read.
func TestServeClientAcceptsUntypedResults(t *testing.T) {
	var v string
	var x any
	b := New()
	b.Register("d", "t", func(ctx context.Context, c Client) (err error) {
		if v, err = c.GetVariable(ctx, "k"); err != nil {
			return err
		}
		x, err = c.GetXCom(ctx, XComRef{TaskID: "up"})
		return err
	})
	s := runFake(t, b, startupFrame(t, "d", "t", nil), func(m protocol.Message) (map[string]any, map[string]any) {
		return map[string]any{"key": "k", "value": "val"}, nil
	}, serveConfig{})
	if s.terminal == nil || s.terminal.Type() != "SucceedTask" || v != "val" || x != "val" {
		t.Fatalf("terminal %+v, variable %q, xcom %v", s.terminal, v, x)
	}
}

// A TI id that is not a UUID fails the task (TaskState failed, even with
// retries left) without running its body, as Airflow's Go SDK does.
func TestServeNonUUIDTaskInstanceFails(t *testing.T) {
	ran := false
	b := New()
	b.Register("d", "t", func() error { ran = true; return nil })
	for id, ok := range map[string]bool{
		"0195c1f2-0000-7000-8000-000000000001": true,
		"0195C1F200007000800000000000000A":     true,
		"not-a-uuid":                           false,
		"0195c1f2-0000-7000-8000_000000000001": false,
		"0195c1f2-0000-7000-8000-00000000000g": false,
	} {
		ran = false
		s := runFake(t, b, startupFrame(t, "d", "t", func(sd *protocol.StartupDetails) {
			sd.TI.ID = id
			sd.ShouldRetry = true
		}), nil, serveConfig{})
		if s.err != nil || s.terminal == nil {
			t.Fatalf("%s: err %v terminal %+v", id, s.err, s.terminal)
		}
		if ok {
			if !ran || s.terminal.Type() != "SucceedTask" {
				t.Errorf("%s is a UUID: want the task run and SucceedTask, got ran=%v %s", id, ran, s.terminal.Type())
			}
			continue
		}
		if ran || s.terminal.Type() != "TaskState" || s.terminal.Body["state"] != "failed" {
			t.Errorf("%s: want TaskState failed without running the task, got ran=%v %+v", id, ran, s.terminal.Body)
		}
	}
}

// A call made with a cancelled context fails at once and sends nothing, so
// a task that returns after SIGTERM never half-pushes its result.
func TestServeCancelledCallSendsNothing(t *testing.T) {
	var errs []error
	b := New()
	b.Register("d", "t", func(ctx context.Context, c Client) error {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := c.GetVariable(cctx, "k")
		errs = append(errs, err)
		errs = append(errs, c.SetXCom(cctx, "k", 1))
		return nil
	})
	s := runFake(t, b, startupFrame(t, "d", "t", nil), func(m protocol.Message) (map[string]any, map[string]any) {
		return map[string]any{"type": "VariableResult", "key": "k", "value": "v"}, nil
	}, serveConfig{})
	if len(s.requests) != 0 {
		t.Fatalf("cancelled calls must send nothing, got %+v", s.requests)
	}
	for i, err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("call %d: got %v, want context.Canceled", i, err)
		}
	}
}

// The supervisor's sockets are on this host: no TCP keep-alive probes,
// whose set-up was four setsockopt calls per socket at every task start.
func TestSupervisorSocketsHaveNoKeepAlive(t *testing.T) {
	var addrs []string
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			if c, err := l.Accept(); err == nil {
				defer c.Close()
				io.Copy(io.Discard, c)
			}
		}()
		addrs = append(addrs, l.Addr().String())
	}
	comm, logs, err := dialBoth(context.Background(), addrs[0], addrs[1])
	if err != nil {
		t.Fatal(err)
	}
	defer comm.Close()
	defer logs.Close()
	for name, c := range map[string]net.Conn{"comm": comm, "logs": logs} {
		raw, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var on int
		var optErr error
		if err := raw.Control(func(fd uintptr) {
			on, optErr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
		}); err != nil || optErr != nil {
			t.Fatalf("%s: reading SO_KEEPALIVE: %v %v", name, err, optErr)
		}
		if on != 0 {
			t.Errorf("the %s socket has TCP keep-alive on", name)
		}
	}
}
