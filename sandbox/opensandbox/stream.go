package opensandbox

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Event types execd sends on a command stream.
const (
	EventInit     = "init"
	EventPing     = "ping"
	EventStdout   = "stdout"
	EventStderr   = "stderr"
	EventComplete = "execution_complete"
	EventError    = "error"
)

// MaxEventBytes bounds one event. execd sends one event per output line, so
// this is also the longest output line a command can print before the
// stream is refused: memory stays bounded whatever the command does.
const MaxEventBytes = 16 << 20

// Event is one execd stream event. Unknown fields are ignored.
type Event struct {
	Type          string       `json:"type"`
	Text          string       `json:"text,omitempty"`
	ExecutionTime int64        `json:"execution_time,omitempty"` // ms
	Timestamp     int64        `json:"timestamp,omitempty"`      // unix ms
	Error         *ErrorDetail `json:"error,omitempty"`
}

// ErrorDetail is the error object of an "error" event.
type ErrorDetail struct {
	Name      string   `json:"ename"`
	Value     string   `json:"evalue"`
	Traceback []string `json:"traceback,omitempty"`
}

// EventReader splits an execd command stream into events. The framing is
// not standard SSE: each event is a bare JSON object followed by a blank
// line. Proxies and other versions may add a "data:" prefix, so both forms
// are accepted; SSE field lines (event:, id:, retry:) and comments are
// skipped.
type EventReader struct {
	r    *bufio.Reader
	data []byte
}

// NewEventReader reads events from r.
func NewEventReader(r io.Reader) *EventReader {
	return &EventReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// ErrEventTooLarge means one event exceeded MaxEventBytes.
var ErrEventTooLarge = fmt.Errorf("execd stream event is larger than %d bytes", MaxEventBytes)

// Next returns the next event, io.EOF at a clean end of stream (no partial
// event pending), or io.ErrUnexpectedEOF when the stream stops mid-event.
func (er *EventReader) Next() (Event, error) {
	for {
		line, err := er.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) {
				if len(bytes.TrimSpace(er.data)) == 0 {
					return Event{}, io.EOF
				}
				// The last event may lack its blank line; accept it if whole.
				if ev, ok := er.decodePending(); ok {
					return ev, nil
				}
				return Event{}, io.ErrUnexpectedEOF
			}
			return Event{}, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			if ev, ok := er.decodePending(); ok {
				return ev, nil
			}
			if len(er.data) > 0 {
				return Event{}, fmt.Errorf("execd stream event is not JSON: %.200q", er.data)
			}
			continue
		}
		line = bytes.TrimRight(line, "\r")
		switch {
		case bytes.HasPrefix(line, []byte("data:")):
			line = bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))
		case line[0] == ':', bytes.HasPrefix(line, []byte("event:")), bytes.HasPrefix(line, []byte("id:")), bytes.HasPrefix(line, []byte("retry:")):
			continue
		}
		if len(er.data) > 0 {
			er.data = append(er.data, '\n') // SSE joins multi-line data with \n
		}
		er.data = append(er.data, line...)
		if len(er.data) > MaxEventBytes {
			return Event{}, ErrEventTooLarge
		}
		// A whole JSON object ends the event even without the blank line,
		// as the Go SDK assumes.
		if ev, ok := er.decodePending(); ok {
			return ev, nil
		}
	}
}

// readLine reads one line without its \n, refusing lines over the bound.
func (er *EventReader) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := er.r.ReadSlice('\n')
		if len(line)+len(chunk) > MaxEventBytes+2 {
			return nil, ErrEventTooLarge
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return line, nil // a final line without \n; EOF comes next call
		default:
			return nil, err
		}
	}
}

func (er *EventReader) decodePending() (Event, bool) {
	data := bytes.TrimSpace(er.data)
	if len(data) == 0 {
		return Event{}, false
	}
	var ev Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return Event{}, false
	}
	er.data = er.data[:0]
	return ev, true
}

// ExitCode reads the exit code of a terminal event: 0 for
// execution_complete, int(evalue) for error. ok is false for non-terminal
// events and for errors whose evalue is not a number (a command that could
// not start; the message is then in evalue).
func (ev Event) ExitCode() (code int, ok bool) {
	switch ev.Type {
	case EventComplete:
		return 0, true
	case EventError:
		if ev.Error == nil {
			return 0, false
		}
		n, err := strconv.Atoi(strings.TrimSpace(ev.Error.Value))
		if err != nil {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// Terminal reports whether the event ends the command.
func (ev Event) Terminal() bool { return ev.Type == EventComplete || ev.Type == EventError }

// KilledExitCode is the evalue execd reports for a command killed by its
// timeout or by an interrupt.
const KilledExitCode = -1

// OutputLine turns a stdout/stderr event text back into bytes. execd strips
// the line terminator from each line and sends an empty line as "\n", so a
// newline is re-added to everything else.
//
// Approximation: execd flushes a final line that had no newline as an
// ordinary event, indistinguishable from a whole line, so on its own this
// gives such output a newline it did not have. The driver avoids that by
// printing a marker after each command (see wrapCommand); only a command
// killed before the marker falls back to the guess. A "\r" or "\r\n"
// terminator comes back as "\n" in every case.
func OutputLine(text string) string {
	if text == "\n" {
		return "\n"
	}
	return text + "\n"
}
