package supervisor

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/airflow-sandbox/airflow-go-worker/redact"
)

// What a Result keeps of a task's output and log records: the most recent
// lines, up to these many bytes each. Everything is still shown on Logs as
// it arrives; only the copy kept for the caller is bounded, so a task that
// prints gigabytes does not grow the supervisor's memory.
const (
	MaxKeptOutput   = 4 << 20
	MaxKeptLogLines = 4 << 20
	// maxOutputLine is where an endless output line is shown in pieces.
	maxOutputLine = 64 << 10
	// maxLogRecord is the longest log record read; a longer one is skipped
	// (with a note), not buffered.
	maxLogRecord = 16 << 20
)

// redactor masks what the task asked Airflow to mask, and the passwords the
// supervisor served.
type redactor struct{ set *redact.Set }

func newRedactor() *redactor { return &redactor{set: redact.New()} }

// add registers a MaskSecret value: a string, or (as Airflow's masker
// accepts) a mapping or list whose strings are all secrets.
func (r *redactor) add(v any) {
	switch x := v.(type) {
	case string:
		r.set.Add(x)
	case map[string]any:
		for _, e := range x {
			r.add(e)
		}
	case []any:
		for _, e := range x {
			r.add(e)
		}
	}
}

func (r *redactor) apply(s string) string { return r.set.String(s) }

func (r *redactor) applyAny(v any) any { return r.set.Any(v) }

// tail keeps the most recent items within a byte budget, counting what it
// dropped.
type tail[T any] struct {
	mu      sync.Mutex
	max     int
	items   []T
	sizes   []int
	head    int
	bytes   int
	dropped int
}

func (t *tail[T]) add(v T, size int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.items = append(t.items, v)
	t.sizes = append(t.sizes, size)
	t.bytes += size
	for t.bytes > t.max && len(t.items)-t.head > 1 {
		t.bytes -= t.sizes[t.head]
		var zero T
		t.items[t.head] = zero
		t.head++
		t.dropped++
	}
	if t.head > 1024 && t.head > len(t.items)/2 { // reclaim the dropped front
		t.items = append([]T(nil), t.items[t.head:]...)
		t.sizes = append([]int(nil), t.sizes[t.head:]...)
		t.head = 0
	}
}

func (t *tail[T]) get() ([]T, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]T(nil), t.items[t.head:]...), t.dropped
}

// outputSink shows the child's stdout and stderr lines, masked, and keeps
// the most recent ones.
type outputSink struct {
	red  *redactor
	show *shower
	kept tail[string]
}

func newOutputSink(red *redactor, show *shower) *outputSink {
	return &outputSink{red: red, show: show, kept: tail[string]{max: MaxKeptOutput}}
}

// writer returns an io.Writer that splits one stream into masked lines.
func (o *outputSink) writer(stream string) *redact.Lines {
	return redact.NewLines(o.red.set, maxOutputLine, func(line string, _ bool) {
		o.kept.add(stream+": "+line, len(line)+len(stream)+2)
		o.show.line("task."+stream, line)
	})
}

func (o *outputSink) lines() ([]string, int) { return o.kept.get() }

// readLogs reads JSON log lines until EOF, shows them masked and keeps the
// most recent ones. A record longer than maxLogRecord is skipped, not
// buffered, and reading goes on: stopping would leave the task blocked on a
// full socket.
func readLogs(conn io.Reader, red *redactor, show *shower) ([]map[string]any, int) {
	kept := tail[map[string]any]{max: MaxKeptLogLines}
	br := bufio.NewReaderSize(conn, 64<<10)
	var line []byte
	skipped := 0
	for {
		chunk, err := br.ReadSlice('\n')
		if skipped == 0 && len(line)+len(chunk) <= maxLogRecord {
			line = append(line, chunk...)
		} else {
			skipped += len(line) + len(chunk)
			line = line[:0]
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		switch {
		case skipped > 0:
			show.line("supervisor", fmt.Sprintf("skipped a log record of %d bytes, over the %d-byte limit", skipped, maxLogRecord))
		case len(line) > 0:
			rec, ok := decodeLogLine(line, red, show)
			if ok {
				kept.add(rec, len(line))
				show.record(rec)
			}
		}
		if cap(line) > 1<<20 {
			line = nil // do not hold on to one huge record's buffer
		}
		line, skipped = line[:0], 0
		if err != nil {
			out, dropped := kept.get()
			return out, dropped
		}
	}
}

func decodeLogLine(line []byte, red *redactor, show *shower) (map[string]any, bool) {
	if line[len(line)-1] == '\n' {
		line = line[:len(line)-1]
	}
	if len(line) == 0 {
		return nil, false
	}
	var rec map[string]any
	if err := json.Unmarshal(line, &rec); err != nil || rec == nil {
		show.line("supervisor", "log line is not JSON: "+red.apply(string(line)))
		return nil, false
	}
	rec = red.applyAny(rec).(map[string]any)
	// As Airflow's supervisor: a record needs one of its level names
	// (without one its log reader fails; an unknown one is dropped) and
	// an ISO 8601 timestamp if any; exception becomes error_detail.
	if why := invalidLogRecord(rec); why != "" {
		show.line("supervisor", "log record dropped, as Airflow would not show it: "+why+": "+red.apply(string(line)))
		return nil, false
	}
	if exc, ok := rec["exception"]; ok {
		delete(rec, "exception")
		rec["error_detail"] = exc
	}
	return rec, true
}
