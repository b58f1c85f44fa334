package bundles

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"
)

// session is what a fake supervisor saw during one serve call.
type session struct {
	requests []protocol.Message // non-terminal requests, in order, but SetRenderedFields
	// rendered are the SetRenderedFields requests.
	rendered []protocol.Message
	terminal *protocol.Message
	logs     []map[string]any
	err      error // serve's return value
}

func (s session) logEvents() []string {
	var out []string
	for _, l := range s.logs {
		out = append(out, l["event"].(string))
	}
	return out
}

// rawReplyKey in a reply body makes the fake supervisor write the []byte
// under it verbatim instead of an encoded reply frame.
const rawReplyKey = "\x00raw"

type replyFunc func(m protocol.Message) (body, errBody map[string]any)

var terminalTypes = map[string]bool{protocol.TypeSucceedTask: true, protocol.TypeRetryTask: true, protocol.TypeTaskState: true, protocol.TypeDeferTask: true}

// runFake runs b.serve against an in-process fake supervisor that sends
// first (an encoded frame payload) and answers requests with reply.
func runFake(t testing.TB, b *Bundle, first []byte, reply replyFunc, cfg serveConfig) session {
	t.Helper()
	return runFakeWith(t, b, first, reply, cfg, context.Background())
}

// runFakeWith is runFake with the context passed to serve.
func runFakeWith(t testing.TB, b *Bundle, first []byte, reply replyFunc, cfg serveConfig, parent context.Context) session {
	t.Helper()
	if cfg.lookupEnv == nil {
		cfg.lookupEnv = func(string) (string, bool) { return "", false }
	}
	if cfg.cancelGrace == 0 {
		cfg.cancelGrace = time.Second
	}
	commL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logsL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { commL.Close(); logsL.Close() })
	ctx, cancel := deadline.Bound(t, parent)
	defer cancel()
	errCh := make(chan error, 1)
	go func() { errCh <- b.serve(ctx, commL.Addr().String(), logsL.Addr().String(), cfg) }()

	logsCh := make(chan []map[string]any, 1)
	go func() {
		c, err := logsL.Accept()
		if err != nil {
			logsCh <- nil
			return
		}
		defer c.Close()
		var lines []map[string]any
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("log line is not JSON: %q", sc.Text())
				continue
			}
			lines = append(lines, m)
		}
		logsCh <- lines
	}()
	comm, err := commL.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer comm.Close()
	var s session
	// The terminal frame must reuse the first frame's id.
	firstID := int64(-1)
	if m, err := protocol.DecodeMessageCut(first); err == nil {
		firstID = m.ID
	}
	if err := protocol.WriteFrame(comm, first); err != nil {
		t.Fatal(err)
	}
	for {
		p, err := protocol.ReadFrame(comm)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Logf("fake supervisor read: %v", err)
			}
			break
		}
		m, err := protocol.DecodeMessage(p)
		if err != nil {
			t.Fatalf("runtime sent a malformed frame: %v", err)
		}
		if terminalTypes[m.Type()] {
			if m.ID != firstID {
				t.Errorf("terminal frame id = %d, want the StartupDetails id %d", m.ID, firstID)
			}
			s.terminal = &m
			continue // keep reading: the runtime must close without waiting
		}
		if m.Type() == protocol.TypeSetRenderedFields {
			s.rendered = append(s.rendered, m)
		} else {
			s.requests = append(s.requests, m)
		}
		var body, eb map[string]any
		if reply != nil {
			body, eb = reply(m)
		}
		if raw, ok := body[rawReplyKey].([]byte); ok {
			// Bytes the test wants on the wire as they are (a broken frame).
			if _, err := comm.Write(raw); err != nil {
				t.Logf("fake supervisor write: %v", err)
			}
			continue
		}
		rp, _ := protocol.EncodeReply(m.ID, rawOrNil(body), rawOrNil(eb))
		if err := protocol.WriteFrame(comm, rp); err != nil {
			t.Logf("fake supervisor write: %v", err)
		}
	}
	s.err = <-errCh
	s.logs = <-logsCh
	return s
}

func startupFrame(t testing.TB, dagID, taskID string, mutate func(sd *protocol.StartupDetails)) []byte {
	t.Helper()
	sd := protocol.StartupDetails{
		TI: protocol.TaskInstance{ID: "0195c1f2-0000-7000-8000-000000000001", DagID: dagID, TaskID: taskID,
			RunID: "manual__2026-11-29", TryNumber: 1, MapIndex: -1, Queue: "default", MaxTries: 1},
		StartDate: time.Now().UTC(),
		DagRun:    protocol.DagRun{DagID: dagID, RunID: "manual__2026-11-29", RunType: "manual", Conf: map[string]any{}},
	}
	if mutate != nil {
		mutate(&sd)
	}
	p, err := protocol.EncodeReply(0, sd.Body(true), nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// rawOrNil is a test's reply map as a body, nil staying nil.
func rawOrNil(m map[string]any) protocol.Body {
	if m == nil {
		return nil
	}
	return protocol.Raw(m)
}

// connectionGetter is a narrow interface of a task's own, which the runtime
// client satisfies: tasks may ask for one instead of Client.
type connectionGetter interface {
	GetConnection(ctx context.Context, connID string) (connections.Connection, error)
}
