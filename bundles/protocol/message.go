package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Message is one decoded envelope. Requests are [id, body]; replies are
// [id, body] or [id, body, error]. Body and Err are nil when the wire had nil.
type Message struct {
	ID   int64
	Body map[string]any
	Err  map[string]any
}

// Type is the body's "type" discriminator, or "" when there is no body.
func (m Message) Type() string {
	s, _ := m.Body["type"].(string)
	return s
}

// ErrorResponse returns the ErrorResponse carried by m, whether as the third
// element or as the body (Airflow uses both, spec 3.4), or nil.
func (m Message) ErrorResponse() *APIError {
	if m.Err != nil {
		return apiErrorFrom(m.Err)
	}
	if m.Type() == "ErrorResponse" {
		return apiErrorFrom(m.Body)
	}
	return nil
}

// APIError is an ErrorResponse from the supervisor.
type APIError struct {
	Code   string // ErrorType, e.g. CONNECTION_NOT_FOUND; GENERIC_ERROR when absent
	Detail any
}

func (e *APIError) Error() string {
	if e.Detail == nil {
		return "supervisor error " + e.Code
	}
	return fmt.Sprintf("supervisor error %s: %s", e.Code, describeDetail(e.Detail))
}

// describeDetail renders an error detail for a person: a lone message as
// itself, anything else as JSON rather than Go's map[...] syntax.
func describeDetail(d any) string {
	switch v := d.(type) {
	case string:
		return v
	case map[string]any:
		if msg, ok := v["message"].(string); ok && len(v) == 1 {
			return msg
		}
	}
	if b, err := json.Marshal(d); err == nil {
		return string(b)
	}
	return fmt.Sprint(d)
}

func apiErrorFrom(m map[string]any) *APIError {
	code, _ := m["error"].(string)
	if code == "" {
		code = "GENERIC_ERROR"
	}
	return &APIError{Code: code, Detail: m["detail"]}
}

// EncodeRequest encodes a runtime -> supervisor frame payload [id, body].
func EncodeRequest(id int64, body Body) ([]byte, error) {
	return msgpack.Marshal([]any{id, stamp(body)})
}

// EncodeReply encodes a supervisor -> runtime payload [id, body, err]; a
// nil body goes out as msgpack nil.
func EncodeReply(id int64, body, errBody Body) ([]byte, error) {
	return msgpack.Marshal([]any{id, stamp(body), stamp(errBody)})
}

// DecodeMessage decodes a frame payload into a Message. It accepts 2 or 3
// elements and never panics on hostile input: structure and nesting are
// checked before the msgpack decoder sees the bytes.
func DecodeMessage(payload []byte) (Message, error) {
	cuts, err := checkStructure(payload)
	if err != nil {
		return Message{}, fmt.Errorf("malformed frame: %w", err)
	}
	if len(cuts) > 0 {
		return Message{}, fmt.Errorf("malformed frame: msgpack nesting deeper than %d levels", MaxNesting)
	}
	return decodeChecked(payload)
}

// DecodeMessageCut is DecodeMessage for a frame that may hold values
// nested deeper than MaxNesting where the runtime can do without them:
// each such map or list decodes as a TooDeep, for the message's parser to
// refuse where it may not stand (ParseStartupDetails allows them in an
// asset event's extra only).
func DecodeMessageCut(payload []byte) (Message, error) {
	cuts, err := checkStructure(payload)
	if err != nil {
		return Message{}, fmt.Errorf("malformed frame: %w", err)
	}
	if len(cuts) > 0 {
		payload = cutOut(payload, cuts)
	}
	return decodeChecked(payload)
}

// decodeChecked decodes a payload checkStructure passed.
func decodeChecked(payload []byte) (Message, error) {
	dec := msgpack.NewDecoder(bytes.NewReader(payload))
	dec.UseLooseInterfaceDecoding(true)
	v, err := dec.DecodeInterface()
	if err != nil {
		return Message{}, fmt.Errorf("malformed frame: %w", err)
	}
	arr, ok := v.([]any)
	if !ok {
		return Message{}, fmt.Errorf("malformed frame: expected a msgpack array [id, body, error], got %s", typeName(v))
	}
	if len(arr) < 2 || len(arr) > 3 {
		return Message{}, fmt.Errorf("malformed frame: expected 2 or 3 elements, got %d", len(arr))
	}
	var m Message
	id, ok := asInt(arr[0])
	if !ok {
		return Message{}, fmt.Errorf("malformed frame: request id must be an integer, got %s", typeName(arr[0]))
	}
	m.ID = id
	if arr[1] != nil {
		if m.Body, ok = arr[1].(map[string]any); !ok {
			return Message{}, fmt.Errorf("malformed frame: body must be a map, got %s", typeName(arr[1]))
		}
	}
	if len(arr) == 3 && arr[2] != nil {
		if m.Err, ok = arr[2].(map[string]any); !ok {
			return Message{}, fmt.Errorf("malformed frame: error element must be a map, got %s", typeName(arr[2]))
		}
	}
	return m, nil
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "nil"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "a map"
	case bool:
		return "a bool"
	case []byte:
		return "binary"
	case time.Time:
		return "a timestamp"
	}
	if _, ok := asInt(v); ok {
		return "an integer"
	}
	return fmt.Sprintf("%T", v)
}

// asInt accepts every integer width msgpack may produce, and integral floats
// (Python sometimes sends 1.0 where the schema says int).
func asInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int:
		return int64(n), true
	case int8:
		return int64(n), true
	case int16:
		return int64(n), true
	case int32:
		return int64(n), true
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	case uint64:
		if n > math.MaxInt64 {
			return 0, false
		}
		return int64(n), true
	case float64:
		if n == math.Trunc(n) && math.Abs(n) < 1<<53 {
			return int64(n), true
		}
	case float32:
		f := float64(n)
		if f == math.Trunc(f) && math.Abs(f) < 1<<24 {
			return int64(f), true
		}
	}
	return 0, false
}
