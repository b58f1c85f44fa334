package opensandbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	osdk "github.com/alibaba/OpenSandbox/sdks/sandbox/go"

	"github.com/airflow-sandbox/airflow-go-worker/testing/eventually"
)

// Hand-written from the spec's observations of a real execd: bare JSON
// objects, each followed by a blank line.
const execdSuccess = `{"type":"init","text":"0f3c2a9b8d7e6f5a4b3c2d1e0f9a8b7c","timestamp":1767225600000}

{"type":"ping","text":"pong","timestamp":1767225600001}

{"type":"stdout","text":"hello","timestamp":1767225600100}

{"type":"stdout","text":"\n","timestamp":1767225600100}

{"type":"stdout","text":"no-newline","timestamp":1767225600200}

{"type":"stderr","text":"err1","timestamp":1767225600200}

{"type":"execution_complete","execution_time":214,"timestamp":1767225600214}

`

const execdExit3 = `{"type":"init","text":"11112222333344445555666677778888","timestamp":1}

{"type":"ping","text":"pong","timestamp":2}

{"type":"stdout","text":"out","timestamp":3}

{"type":"error","error":{"ename":"CommandExecError","evalue":"3","traceback":["exit status 3"]},"timestamp":4}

`

const execdKilled = `{"type":"init","text":"aaaabbbbccccddddeeeeffff00001111","timestamp":1}

{"type":"ping","text":"pong","timestamp":2}

{"type":"stdout","text":"start","timestamp":3}

{"type":"ping","text":"pong","timestamp":3002}

{"type":"error","error":{"ename":"CommandExecError","evalue":"-1","traceback":["signal: killed"]},"timestamp":3003}

`

// The same events as standard SSE, as a proxy or another version may send.
const sseVariant = ": comment\nevent: message\nid: 1\ndata: {\"type\":\"init\",\"text\":\"cafe\"}\n\n" +
	"data:{\"type\":\"stdout\",\"text\":\"x\"}\r\n\r\n" +
	"retry: 1000\ndata: {\"type\":\"error\",\"error\":{\"ename\":\"CommandExecError\",\"evalue\":\"127\",\"traceback\":[\"exit status 127\"]}}\n\n"

// Objects back to back without blank lines (the Go SDK's reading).
const noBlankLines = `{"type":"init","text":"id1"}
{"type":"stdout","text":"a"}
{"type":"execution_complete","execution_time":1}`

// A command that could not start: evalue is Go error text, not a number.
const startFailure = `{"type":"init","text":"id2"}

{"type":"error","error":{"ename":"CommandExecError","evalue":"fork/exec /bin/bash: no such file or directory","traceback":[]}}

`

// readAll serves the stream r as execd's answer to POST /command, reads
// it with the SDK through a driver's client (guard.go included), and
// returns the events the driver decodes from it.
func readAll(t *testing.T, r io.Reader) ([]event, error) {
	t.Helper()
	srv := serve(t, func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			w.Write(buf[:n])
			w.(http.Flusher).Flush()
			if err != nil {
				return
			}
		}
	})
	return streamEvents(testDriver(t, srv.URL), srv.URL)
}

func streamEvents(d *Driver, u string) ([]event, error) {
	var out []event
	err := execdAt(d, u, nil).c.RunCommand(context.Background(), osdk.RunCommandRequest{Command: "x"}, func(se osdk.StreamEvent) error {
		evs, err := decodeEvents(se.Data)
		out = append(out, evs...)
		return err
	})
	return out, err
}

func terminal(ev event) bool { return ev.Type == eventComplete || ev.Type == eventError }

func types(evs []event) string {
	var s []string
	for _, e := range evs {
		s = append(s, e.Type+":"+e.Text)
	}
	return strings.Join(s, "|")
}

// chunked returns reads of random sizes, 1 to 7 bytes.
type chunked struct {
	data []byte
	rng  *rand.Rand
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), 1+c.rng.IntN(7), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func TestEventReaderFixtures(t *testing.T) {
	tests := []struct {
		name     string
		stream   string
		want     string
		exitCode int
		exitOK   bool
	}{
		{"success", execdSuccess, "init:0f3c2a9b8d7e6f5a4b3c2d1e0f9a8b7c|ping:pong|stdout:hello|stdout:\n|stdout:no-newline|stderr:err1|execution_complete:", 0, true},
		{"exit 3", execdExit3, "init:11112222333344445555666677778888|ping:pong|stdout:out|error:", 3, true},
		{"killed", execdKilled, "init:aaaabbbbccccddddeeeeffff00001111|ping:pong|stdout:start|ping:pong|error:", KilledExitCode, true},
		{"sse data prefix", sseVariant, "init:cafe|stdout:x|error:", 127, true},
		{"no blank lines", noBlankLines, "init:id1|stdout:a|execution_complete:", 0, true},
		{"start failure", startFailure, "init:id2|error:", 0, false},
	}
	for _, tt := range tests {
		readers := map[string]func() io.Reader{
			"whole":    func() io.Reader { return strings.NewReader(tt.stream) },
			"one byte": func() io.Reader { return iotest.OneByteReader(strings.NewReader(tt.stream)) },
			"random":   func() io.Reader { return &chunked{data: []byte(tt.stream), rng: rand.New(rand.NewPCG(1, 2))} },
		}
		for rname, mk := range readers {
			t.Run(tt.name+"/"+rname, func(t *testing.T) {
				evs, err := readAll(t, mk())
				if err != nil {
					t.Fatal(err)
				}
				if got := types(evs); got != tt.want {
					t.Fatalf("events\n got %q\nwant %q", got, tt.want)
				}
				last := evs[len(evs)-1]
				if !terminal(last) {
					t.Fatalf("last event %q is not terminal", last.Type)
				}
				code, ok := last.exitCode()
				if ok != tt.exitOK || code != tt.exitCode {
					t.Fatalf("exit code %d,%v want %d,%v", code, ok, tt.exitCode, tt.exitOK)
				}
			})
		}
	}
}

func TestEventReaderBrokenStreams(t *testing.T) {
	t.Run("cut mid-event", func(t *testing.T) {
		cut := execdSuccess[:strings.Index(execdSuccess, `"no-newline"`)]
		evs, err := readAll(t, strings.NewReader(cut))
		if err == nil || !strings.Contains(err.Error(), "not JSON") {
			t.Fatalf("err = %v after %d events", err, len(evs))
		}
		if len(evs) != 4 {
			t.Fatalf("want the 4 whole events before the cut, got %d", len(evs))
		}
	})
	t.Run("cut between events is a clean end without a terminal event", func(t *testing.T) {
		cut := execdSuccess[:strings.Index(execdSuccess, `{"type":"stdout","text":"no-newline"`)]
		evs, err := readAll(t, strings.NewReader(cut))
		if err != nil || len(evs) != 4 || terminal(evs[3]) {
			t.Fatalf("events %v err %v", types(evs), err)
		}
	})
	t.Run("not json", func(t *testing.T) {
		evs, err := readAll(t, strings.NewReader("<html>Bad Gateway</html>\n\n"))
		if err == nil || len(evs) != 0 {
			t.Fatalf("events %v err = %v", types(evs), err)
		}
	})
	t.Run("oversized line", func(t *testing.T) {
		big := `{"type":"stdout","text":"` + strings.Repeat("x", MaxEventBytes+10) + `"}` + "\n\n"
		_, err := readAll(t, strings.NewReader(big))
		if !errors.Is(err, ErrEventTooLarge) {
			t.Fatalf("err = %v", err)
		}
	})
}

// splitLikeExecd turns output into the texts execd sends for it: one event
// per line without its newline, "\n" for an empty line, and a final
// partial line flushed as is.
func splitLikeExecd(s string) []string {
	var out []string
	for {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			if s != "" {
				out = append(out, s)
			}
			return out
		}
		line := s[:i]
		if line == "" {
			line = "\n"
		}
		out = append(out, line)
		s = s[i+1:]
	}
}

// The end marker makes output exact, whatever it ends with.
func TestOutputStreamIsExact(t *testing.T) {
	const marker = "__airflow_end_test__"
	cases := []string{"", "\n", "\n\n", "a", "a\n", "a\n\n", "hello\n\npartial", "x\ny", "FROM STDIN"}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteByte("ab\n"[rng.IntN(3)])
		}
		cases = append(cases, b.String())
	}
	for _, out := range cases {
		// What the wrapper prints: the output, then "\n<marker>\n".
		var got bytes.Buffer
		o := newOutputStream(&got)
		o.delay = time.Hour
		for _, text := range splitLikeExecd(out + "\n" + marker + "\n") {
			var err error
			if text == marker {
				err = o.marker()
			} else {
				err = o.line(text)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		o.finish()
		if got.String() != out {
			t.Fatalf("output %q came back as %q", out, got.String())
		}
	}
}

// Without the marker (a killed command) the final line gains a newline:
// the documented approximation.
func TestOutputStreamWithoutMarker(t *testing.T) {
	var got bytes.Buffer
	o := newOutputStream(&got)
	for _, text := range splitLikeExecd("a\n\nb") {
		o.line(text)
	}
	o.finish()
	if got.String() != "a\n\nb\n" {
		t.Fatalf("got %q", got.String())
	}
}

func TestWrapCommandQuotes(t *testing.T) {
	got := wrapCommand(`echo 'it''s' "$HOME"`, "", "M")
	want := `sh -c 'echo '\''it'\'''\''s'\'' "$HOME"' </dev/null; __rc=$?; printf '\n%s\n' M; printf '\n%s\n' M >&2; exit $__rc`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if got := wrapCommand("cat", "/tmp/in", "M"); !strings.HasPrefix(got, "exec <'/tmp/in'; rm -f '/tmp/in'; sh -c 'cat'") {
		t.Fatalf("stdin form: %s", got)
	}
}

// A line followed by silence gets its newline after the delay, so
// line-based log readers see it while the command still runs.
func TestOutputStreamPaysNewlineAfterQuiet(t *testing.T) {
	var got bytes.Buffer
	o := newOutputStream(&got)
	o.delay = 10 * time.Millisecond
	if err := o.line("started"); err != nil {
		t.Fatal(err)
	}
	read := func() string {
		o.mu.Lock()
		defer o.mu.Unlock()
		return got.String()
	}
	if s := read(); s != "started" && s != "started\n" {
		t.Fatalf("the text was not written at once: %q", s)
	}
	if !eventually.Holds(t, func() bool { return read() == "started\n" }) {
		t.Fatalf("newline never paid: %q", read())
	}
	o.line("done")
	o.line("\n") // the wrapper's newline
	o.marker()
	o.finish()
	if read() != "started\ndone\n" {
		t.Fatalf("got %q", read())
	}
}

// BenchmarkCommandStream reads a stream of 80-byte stdout lines as Exec
// does: over loopback HTTP, through the SDK's reader and decodeEvents.
func BenchmarkCommandStream(b *testing.B) {
	var buf bytes.Buffer
	line := `{"type":"stdout","text":"` + strings.Repeat("x", 80) + `","timestamp":1767225600100}` + "\n\n"
	for range 10000 {
		buf.WriteString(line)
	}
	data := buf.Bytes()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(data) }))
	defer srv.Close()
	d, err := New(Options{Config: configFor(strings.TrimPrefix(srv.URL, "http://"))})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if evs, err := streamEvents(d, srv.URL); err != nil || len(evs) != 10000 {
			b.Fatalf("%d events, %v", len(evs), err)
		}
	}
}
