package protocol

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
)

// TooDeep stands, in a message DecodeMessageCut decoded, for a map or list
// whose contents nest deeper than MaxNesting: what the runtime cannot read.
// A frame may carry one only where the runtime can do without it (an
// asset event's extra, which a task may never bind); a task that binds
// into one fails, saying where. It cannot be encoded, as JSON or msgpack:
// a value holding one cannot leave the runtime as if it were whole.
type TooDeep struct{}

// errTooDeep is what encoding a TooDeep says.
var errTooDeep = fmt.Errorf("a value nested deeper than %d levels was cut when it was received, and cannot be sent on", MaxNesting)

func (TooDeep) String() string { return fmt.Sprintf("<nested deeper than %d levels>", MaxNesting) }

// MarshalJSON refuses: see TooDeep.
func (TooDeep) MarshalJSON() ([]byte, error) { return nil, errTooDeep }

// EncodeMsgpack refuses: see TooDeep.
func (TooDeep) EncodeMsgpack(*msgpack.Encoder) error { return errTooDeep }

// tooDeepExt is the msgpack ext type a cut is marked with inside the
// payload the decoder reads; checkStructure refuses it from a peer.
const tooDeepExt int8 = 0x5c

// tooDeepMark is a fixext1 of type tooDeepExt.
var tooDeepMark = []byte{0xd4, byte(tooDeepExt), 0}

func init() {
	// Only this package writes one (tooDeepMark): its one data byte says
	// nothing.
	msgpack.RegisterExtDecoder(tooDeepExt, TooDeep{}, func(d *msgpack.Decoder, _ reflect.Value, n int) error {
		return d.ReadFull(make([]byte, n))
	})
}

// cutOut is payload with each of the cuts replaced by tooDeepMark.
func cutOut(payload []byte, cuts []span) []byte {
	out := make([]byte, 0, len(payload))
	at := 0
	for _, c := range cuts {
		out = append(append(out, payload[at:c.start]...), tooDeepMark...)
		at = c.end
	}
	return append(out, payload[at:]...)
}

// FindTooDeep returns where the first TooDeep inside v is (".a.b[2]",
// map keys in order; "" for v itself), or ok false when there is none.
func FindTooDeep(v any) (path string, ok bool) {
	switch x := v.(type) {
	case TooDeep:
		return "", true
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			if p, ok := FindTooDeep(x[k]); ok {
				return "." + k + p, true
			}
		}
	case []any:
		for i, e := range x {
			if p, ok := FindTooDeep(e); ok {
				return fmt.Sprintf("[%d]%s", i, p), true
			}
		}
	}
	return "", false
}

// ErrTooDeep is wrapped by the errors that say a value the task needs was
// cut for nesting deeper than MaxNesting.
var ErrTooDeep = errors.New("nested deeper than the runtime reads")

// cutsAllowed reports whether a cut at path (segments, list indices as
// "*") is one a StartupDetails may carry: inside a triggering asset
// event's extra or its asset's extra.
func cutsAllowed(path []string) bool {
	for _, allowed := range [][]string{
		{"ti_context", "dag_run", "consumed_asset_events", "*", "extra"},
		{"ti_context", "dag_run", "consumed_asset_events", "*", "asset", "extra"},
	} {
		if len(path) > len(allowed) && slices.Equal(path[:len(allowed)], allowed) {
			return true
		}
	}
	return false
}

// checkCuts refuses a TooDeep in body where allowed says none may be,
// naming where it is under prefix.
func checkCuts(body map[string]any, prefix string, allowed func([]string) bool) error {
	var walk func(v any, path []string) error
	walk = func(v any, path []string) error {
		switch x := v.(type) {
		case TooDeep:
			if allowed == nil || !allowed(path) {
				return fmt.Errorf("%s.%s is %w: the most a frame may nest is %d levels", prefix, shortPath(path), ErrTooDeep, MaxNesting)
			}
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(x)) {
				if err := walk(x[k], append(path, k)); err != nil {
					return err
				}
			}
		case []any:
			for _, e := range x {
				if err := walk(e, append(path, "*")); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(body, nil)
}

// shortPath shows a path of a cut, which lies some hundred levels down,
// by its start.
func shortPath(path []string) string {
	const shown = 8
	if len(path) <= shown {
		return strings.Join(path, ".")
	}
	return fmt.Sprintf("%s... (%d levels down)", strings.Join(path[:shown], "."), len(path))
}
