package final

import (
	"errors"
	"fmt"
	"testing"
)

func TestFinalSurvivesWrappingAndNothingElseIsFinal(t *testing.T) {
	kind := New("connection not found")
	for name, err := range map[string]error{
		"kind":         kind,
		"wrapped kind": fmt.Errorf("reading connection %q: %w", "db", kind),
		"marked":       Mark(errors.New("bad input")),
		"errorf":       Errorf("field %s is bad", "x"),
		"wrapped mark": fmt.Errorf("provision: %w", Errorf("bad")),
		"joined":       errors.Join(errors.New("flaky"), kind),
		"wrapped as":   Wrap(kind, errors.New("Modal refused the credentials")),
	} {
		if !Is(err) || !errors.Is(err, Err) {
			t.Errorf("%s: %v is not final", name, err)
		}
	}
	for name, err := range map[string]error{
		"nil":      nil,
		"plain":    errors.New("connection reset"),
		"other":    fmt.Errorf("x: %w", errors.New("y")),
		"not %w'd": fmt.Errorf("x: %v", kind),
	} {
		if Is(err) {
			t.Errorf("%s: %v is final", name, err)
		}
	}
	// Kinds stay distinct sentinels, and messages are unchanged.
	other := New("object not found")
	if errors.Is(kind, other) || !errors.Is(fmt.Errorf("w: %w", kind), kind) {
		t.Error("two kinds must not match each other, and a kind must match itself through a wrap")
	}
	if Mark(nil) != nil || Errorf("a %d", 1).Error() != "a 1" || Mark(errors.New("m")).Error() != "m" || kind.Error() != "connection not found" {
		t.Error("Mark and Errorf keep the message, and Mark(nil) is nil")
	}
	inner := errors.New("inner")
	if !errors.Is(Mark(inner), inner) {
		t.Error("a marked error still matches what it wraps")
	}
	if w := Wrap(kind, inner); !errors.Is(w, kind) || !errors.Is(w, inner) || w.Error() != "inner" || Wrap(kind, nil) != nil {
		t.Errorf("Wrap gives an error its kind and keeps its message: %v", w)
	}
}
