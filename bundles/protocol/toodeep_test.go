package protocol

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func nestedMap(levels int) any {
	var v any = "end"
	for range levels {
		v = map[string]any{"a": v}
	}
	return v
}

// A frame nesting deeper than MaxNesting decodes, cut, only where the
// runtime can do without the cut part: an asset event's extra (issue 38,
// item 3). DecodeMessage still refuses it whole.
func TestDeepValuesAreCutWhereTheyMayBe(t *testing.T) {
	sd := sampleStartup()
	sd.DagRun.TriggeringAssetEvents = []AssetEvent{{Asset: AssetKey{URI: "s3://b/"}, Timestamp: time.Now().UTC(),
		Extra: map[string]any{"url": "s3://b/k", "deep": nestedMap(300)}, AssetExtra: map[string]any{"deep": nestedMap(300)}}}
	p, err := EncodeReply(0, sd.Body(true), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeMessage(p); err == nil || !strings.Contains(err.Error(), "nesting deeper than 128 levels") {
		t.Fatalf("DecodeMessage must refuse it whole, got %v", err)
	}
	m, err := DecodeMessageCut(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseStartupDetails(m.Body)
	if err != nil {
		t.Fatal(err)
	}
	ev := got.DagRun.TriggeringAssetEvents[0]
	if ev.Extra["url"] != "s3://b/k" {
		t.Fatalf("the shallow part of the extra is lost: %v", ev.Extra["url"])
	}
	for name, v := range map[string]any{"extra": ev.Extra, "asset extra": ev.AssetExtra} {
		path, cut := FindTooDeep(v)
		if !cut || !strings.HasPrefix(path, ".deep.a.a") {
			t.Errorf("%s: want a TooDeep under deep, got %q, %v", name, path, cut)
		}
	}

	// Anywhere else, the frame is refused, naming where.
	sd = sampleStartup()
	sd.DagRun.Conf = map[string]any{"deep": nestedMap(300)}
	p, _ = EncodeReply(0, sd.Body(true), nil)
	m, err = DecodeMessageCut(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseStartupDetails(m.Body); !errors.Is(err, ErrTooDeep) || !strings.Contains(err.Error(), "StartupDetails.ti_context.dag_run.conf.deep.a.a.a.a...") {
		t.Fatalf("a cut in conf: want an error naming it, got %v", err)
	}
	p, _ = EncodeReply(0, Raw{"type": TypeTaskHandlerParseRequest, "file": "f", "x": nestedMap(300)}, nil)
	m, _ = DecodeMessageCut(p)
	if _, err := ParseTaskHandlerParseRequest(m.Body); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("a cut in a TaskHandlerParseRequest: want it refused, got %v", err)
	}
}

// What stands for a cut cannot be forged by a peer, nor sent on.
func TestTooDeepCannotBeForgedOrSent(t *testing.T) {
	// [1, {"x": <the mark>}]
	forged := append([]byte{0x92, 0x01, 0x81, 0xa1, 'x'}, tooDeepMark...)
	for name, decode := range map[string]func([]byte) (Message, error){"DecodeMessage": DecodeMessage, "DecodeMessageCut": DecodeMessageCut} {
		if _, err := decode(forged); err == nil || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("%s: a peer's ext of the reserved type: got %v", name, err)
		}
	}
	if _, err := EncodeRequest(1, Raw{"value": map[string]any{"x": TooDeep{}}}); err == nil {
		t.Error("a value holding a TooDeep was encoded")
	}
}

// However deep a cut goes, walking over it keeps nothing per level: a
// million nested arrays are walked with one counter.
func TestACutOfAnyDepthIsWalkedOver(t *testing.T) {
	const depth = 1_000_000
	p := append([]byte{0x92, 0x01, 0x81, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, depth)...)
	p = append(p, 0xc0)
	cuts, err := checkStructure(p)
	if err != nil || len(cuts) != 1 || cuts[0].end != len(p) {
		t.Fatalf("want one cut to the end, got %v, %v", cuts, err)
	}
	m, err := DecodeMessageCut(p)
	if err != nil {
		t.Fatal(err)
	}
	if path, cut := FindTooDeep(m.Body); !cut || !strings.HasPrefix(path, ".x[0][0]") {
		t.Fatalf("want the cut under x, got %q %v", path, cut)
	}
}
