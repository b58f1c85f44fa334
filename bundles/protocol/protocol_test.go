package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	payloads := [][]byte{{}, []byte("a"), bytes.Repeat([]byte{0x90}, 70000)}
	for _, p := range payloads {
		if err := WriteFrame(&buf, p); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range payloads {
		got, err := ReadFrame(&buf)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("frame %d: got %d bytes, want %d", i, len(got), len(want))
		}
	}
	if _, err := ReadFrame(&buf); err != io.EOF {
		t.Fatalf("at a clean end want io.EOF, got %v", err)
	}
}

func TestFrameTooLargeAndTruncated(t *testing.T) {
	hdr := make([]byte, 4)
	binary.BigEndian.PutUint32(hdr, MaxFrameSize+1)
	if _, err := ReadFrame(bytes.NewReader(hdr)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized prefix: want ErrFrameTooLarge, got %v", err)
	}
	if err := WriteFrame(io.Discard, make([]byte, MaxFrameSize+1)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized write: want ErrFrameTooLarge, got %v", err)
	}
	binary.BigEndian.PutUint32(hdr, 10)
	_, err := ReadFrame(io.MultiReader(bytes.NewReader(hdr), strings.NewReader("abc")))
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut frame: want ErrUnexpectedEOF, got %v", err)
	}
	if _, err := ReadFrame(bytes.NewReader([]byte{0, 0})); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut header: want ErrUnexpectedEOF, got %v", err)
	}
}

// Issue 19: a peer that stopped mid-frame left the reader blocked forever.
// ReadFrameWithin waits any time for a frame to start, but not for its rest.
func TestReadFrameWithinStalledMidFrame(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	go func() {
		WriteFrame(server, []byte("whole"))
		server.Write([]byte{0, 0, 0, 100, 'x'}) // 1 of 100 bytes, then silence
	}()
	p, err := ReadFrameWithin(client, time.Minute)
	if err != nil || string(p) != "whole" {
		t.Fatalf("a whole frame: got %q, %v", p, err)
	}
	done := make(chan error, 1)
	go func() { _, err := ReadFrameWithin(client, 50*time.Millisecond); done <- err }()
	err = deadline.Wait(t, "ReadFrameWithin to give up on the peer stalled mid-frame", done)
	if !errors.Is(err, os.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "stopped sending in the middle of a frame") {
		t.Fatalf("want a deadline error naming the stalled frame, got %v", err)
	}
}

func TestMessageRoundTrip(t *testing.T) {
	end := time.Date(2026, 11, 29, 15, 40, 3, 988240000, time.UTC)
	p, err := EncodeRequest(7, Raw{"type": "SucceedTask", "end_date": end, "task_outlets": []any{}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeMessage(p)
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != 7 || m.Type() != "SucceedTask" || m.Err != nil {
		t.Fatalf("got %+v", m)
	}
	if got, ok := m.Body["end_date"].(time.Time); !ok || !got.Equal(end) {
		t.Fatalf("end_date should survive as a timestamp, got %#v", m.Body["end_date"])
	}

	// 3-element reply with the error as third element.
	p, _ = EncodeReply(3, nil, Raw{"type": "ErrorResponse", "error": "API_SERVER_ERROR", "detail": map[string]any{"status_code": 400}})
	m, err = DecodeMessage(p)
	if err != nil {
		t.Fatal(err)
	}
	if e := m.ErrorResponse(); e == nil || e.Code != "API_SERVER_ERROR" {
		t.Fatalf("third-element error not found: %+v", m)
	}
	// Error as body.
	p, _ = EncodeReply(4, Raw{"type": "ErrorResponse", "error": "CONNECTION_NOT_FOUND"}, nil)
	m, _ = DecodeMessage(p)
	if e := m.ErrorResponse(); e == nil || e.Code != "CONNECTION_NOT_FOUND" {
		t.Fatalf("body error not found: %+v", m)
	}
	// Empty reply [id, nil, nil] and 2-element reply.
	for _, raw := range [][]any{{int64(5), nil, nil}, {int64(5), map[string]any{"type": "X"}}} {
		p, _ = msgpack.Marshal(raw)
		m, err = DecodeMessage(p)
		if err != nil || m.ID != 5 || m.ErrorResponse() != nil {
			t.Fatalf("%v: got %+v, %v", raw, m, err)
		}
	}
}

func TestDecodeMessageRejectsBadShapes(t *testing.T) {
	deep := bytes.Repeat([]byte{0x91}, MaxNesting+5)
	deep = append(deep, 0xc0)
	cases := map[string][]byte{
		"not an array":    mustMarshal(t, map[string]any{"a": 1}),
		"one element":     mustMarshal(t, []any{1}),
		"four elements":   mustMarshal(t, []any{1, nil, nil, nil}),
		"string id":       mustMarshal(t, []any{"x", nil}),
		"body not map":    mustMarshal(t, []any{1, "body"}),
		"error not map":   mustMarshal(t, []any{1, nil, 5}),
		"truncated":       mustMarshal(t, []any{1, map[string]any{"type": "abc"}})[:5],
		"trailing bytes":  append(mustMarshal(t, []any{1, nil}), 0xc0),
		"reserved code":   {0x92, 0x01, 0xc1},
		"huge count":      {0xdd, 0xff, 0xff, 0xff, 0xff},
		"too deep":        deep,
		"too many values": append([]byte{0xdd, 0x00, 0x40, 0x00, 0x01}, make([]byte, MaxValues+1)...),
		"empty":           {},
	}
	for name, p := range cases {
		if _, err := DecodeMessage(p); err == nil {
			t.Errorf("%s: want an error", name)
		} else if !strings.Contains(err.Error(), "malformed frame") {
			t.Errorf("%s: error should say the frame is malformed: %v", name, err)
		}
	}
}

func TestValueCap(t *testing.T) {
	array := func(n int) []byte {
		return append([]byte{0xdd, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}, make([]byte, n)...)
	}
	// The array itself counts as one value.
	if _, err := checkStructure(array(MaxValues - 1)); err != nil {
		t.Fatalf("exactly MaxValues values must pass: %v", err)
	}
	if _, err := checkStructure(array(MaxValues)); err == nil || !strings.Contains(err.Error(), "more than 4194304 msgpack values") {
		t.Fatalf("want the value cap, got %v", err)
	}
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sampleStartup() StartupDetails {
	return StartupDetails{
		TI: TaskInstance{ID: "0195c1f2-0000-7000-8000-000000000001", DagID: "d", TaskID: "t", RunID: "manual__1",
			TryNumber: 2, MapIndex: -1, DagVersionID: "0195c1f2-0000-7000-8000-000000000002", Queue: "golang", MaxTries: 3},
		BundleName: "dags",
		StartDate:  time.Date(2026, 11, 29, 12, 0, 0, 123000000, time.UTC),
		DagRun: DagRun{DagID: "d", RunID: "manual__1", RunType: "manual", State: "running",
			LogicalDate: time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), Conf: map[string]any{"n": int64(3)}},
		ShouldRetry: true,
		ArgBindings: []ArgBinding{{Name: "x", Kind: BindLiteral, Value: "v"}},
	}
}

func TestStartupDetailsRoundTrip(t *testing.T) {
	want := sampleStartup()
	p, err := EncodeReply(0, want.Body(true), nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeMessage(p)
	if err != nil {
		t.Fatal(err)
	}
	if m.Type() != TypeStartupDetails {
		t.Fatalf("type %q", m.Type())
	}
	got, err := ParseStartupDetails(m.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got.TI != want.TI || got.TI.MaxTries != 3 || !got.ShouldRetry || !got.StartDate.Equal(want.StartDate) ||
		!got.DagRun.LogicalDate.Equal(want.DagRun.LogicalDate) || got.DagRun.Conf["n"] != int64(3) ||
		len(got.ArgBindings) != 1 || got.ArgBindings[0].Value != "v" || !got.DagRun.EndDate.IsZero() {
		t.Fatalf("round trip mismatch:\n got %+v\nwant %+v", got, want)
	}
}

func TestStartupDetailsTolerance(t *testing.T) {
	body := sampleRaw(t)
	body["brand_new_field"] = map[string]any{"x": 1}
	body["start_date"] = "2026-11-29T12:00:00.5+00:00"
	ti := body["ti"].(map[string]any)
	delete(ti, "map_index")
	delete(ti, "queue")
	ti["try_number"] = float64(1)
	dr := body["ti_context"].(map[string]any)["dag_run"].(map[string]any)
	dr["logical_date"] = "2026-11-29T00:00:00"
	got, err := ParseStartupDetails(body)
	if err != nil {
		t.Fatal(err)
	}
	if got.TI.MapIndex != -1 || got.TI.Queue != "default" || got.TI.TryNumber != 1 {
		t.Fatalf("defaults not applied: %+v", got.TI)
	}
	if want := time.Date(2026, 11, 29, 12, 0, 0, 5e8, time.UTC); !got.StartDate.Equal(want) {
		t.Fatalf("string start_date: got %v", got.StartDate)
	}
	if got.DagRun.LogicalDate.IsZero() {
		t.Fatal("naive logical_date should parse as UTC")
	}
}

func TestStartupDetailsRequiredFields(t *testing.T) {
	for _, tc := range []struct {
		mutate func(ti map[string]any)
		want   string
	}{
		{func(ti map[string]any) { delete(ti, "id") }, "ti.id is required"},
		{func(ti map[string]any) { ti["dag_id"] = "" }, "ti.dag_id is required"},
		{func(ti map[string]any) { delete(ti, "task_id") }, "ti.task_id"},
		{func(ti map[string]any) { ti["run_id"] = nil }, "ti.run_id"},
		{func(ti map[string]any) { ti["try_number"] = 0 }, "try_number must be at least 1"},
		{func(ti map[string]any) { ti["try_number"] = "one" }, "try_number must be an integer"},
	} {
		body := sampleRaw(t)
		tc.mutate(body["ti"].(map[string]any))
		_, err := ParseStartupDetails(body)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want error containing %q, got %v", tc.want, err)
		}
	}
	if _, err := ParseStartupDetails(map[string]any{"type": "StartupDetails"}); err == nil || !strings.Contains(err.Error(), "StartupDetails.ti is required") {
		t.Errorf("missing ti: %v", err)
	}
	body := sampleRaw(t)
	body["start_date"] = "yesterday"
	if _, err := ParseStartupDetails(body); err == nil || !strings.Contains(err.Error(), "start_date") {
		t.Errorf("bad date should name the field: %v", err)
	}
}

func TestParseTaskHandlerParseRequest(t *testing.T) {
	r, err := ParseTaskHandlerParseRequest(map[string]any{"type": TypeTaskHandlerParseRequest, "file": "/b/x", "bundle_name": "dags", "dag_ids": []any{"a"}})
	if err != nil || r.File != "/b/x" || r.BundleName != "dags" || len(r.DagIDs) != 1 {
		t.Fatalf("got %+v, %v", r, err)
	}
	if _, err := ParseTaskHandlerParseRequest(map[string]any{"dag_ids": "a"}); err == nil {
		t.Fatal("dag_ids as a string should be rejected")
	}
}

func FuzzFrame(f *testing.F) {
	seed := func(v any) []byte {
		var buf bytes.Buffer
		_ = WriteFrame(&buf, mustMarshal(f, v))
		return buf.Bytes()
	}
	f.Add(seed([]any{0, stamp(sampleStartup().Body(true)), nil}))
	f.Add(seed([]any{1, nil}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 3, 0x92, 0x01, 0xc1})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for {
			p, err := ReadFrame(r)
			if err != nil {
				return
			}
			m, err := DecodeMessage(p)
			if err != nil {
				continue
			}
			// A decodable message must re-encode and decode to the same id.
			again, err := EncodeReply(m.ID, rawOrNil(m.Body), rawOrNil(m.Err))
			if err != nil {
				continue // e.g. values msgpack cannot re-encode; not our concern
			}
			m2, err := DecodeMessage(again)
			if err != nil || m2.ID != m.ID {
				t.Fatalf("re-encoded message does not decode: %v (id %d vs %d)", err, m2.ID, m.ID)
			}
		}
	})
}

func FuzzStartupDetails(f *testing.F) {
	f.Add(mustMarshal(f, stamp(sampleStartup().Body(true))))
	f.Add(mustMarshal(f, map[string]any{"ti": map[string]any{"id": "x"}}))
	f.Add(mustMarshal(f, map[string]any{"ti": map[string]any{"id": "a", "dag_id": "b", "task_id": "c", "run_id": "d", "try_number": 1}, "ti_context": map[string]any{"arg_bindings": []any{1}}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeMessageCut(append([]byte{0x92, 0x00}, data...))
		if err != nil || m.Body == nil {
			return
		}
		sd, err := ParseStartupDetails(m.Body)
		if err != nil {
			return
		}
		// Whatever was accepted satisfies the documented invariants.
		if sd.TI.ID == "" || sd.TI.DagID == "" || sd.TI.TaskID == "" || sd.TI.RunID == "" || sd.TI.TryNumber < 1 {
			t.Fatalf("accepted invalid TI: %+v", sd.TI)
		}
		if sd.TI.Queue == "" {
			t.Fatal("queue default not applied")
		}
	})
}

// An ErrorResponse detail reaches the task log readably: a lone message as
// itself, a richer detail as JSON, never as Go's map[...] syntax.
func TestAPIErrorDetailIsReadable(t *testing.T) {
	cases := []struct {
		detail any
		want   string
	}{
		{map[string]any{"message": "AIRFLOW_CONN_BAD is not a valid Airflow connection"}, "supervisor error API_SERVER_ERROR: AIRFLOW_CONN_BAD is not a valid Airflow connection"},
		{map[string]any{"message": "gone", "status_code": 404}, `supervisor error API_SERVER_ERROR: {"message":"gone","status_code":404}`},
		{"plain text", "supervisor error API_SERVER_ERROR: plain text"},
		{nil, "supervisor error API_SERVER_ERROR"},
	}
	for _, c := range cases {
		got := (&APIError{Code: "API_SERVER_ERROR", Detail: c.detail}).Error()
		if got != c.want {
			t.Errorf("detail %#v: got %q, want %q", c.detail, got, c.want)
		}
	}
}

// rawOrNil is m as a Raw body, nil staying a nil Body.
func rawOrNil(m map[string]any) Body {
	if m == nil {
		return nil
	}
	return Raw(m)
}

// sampleRaw is sampleStartup's body as the runtime decodes it, to mutate.
func sampleRaw(t *testing.T) map[string]any {
	t.Helper()
	body, err := AsRaw(sampleStartup().Body(true))
	if err != nil {
		t.Fatal(err)
	}
	return body
}
