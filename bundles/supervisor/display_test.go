package supervisor

import (
	"strings"
	"testing"
)

// Shown logs are for people: a shell command must read as typed.
func TestShownLogFieldsAreNotHTMLEscaped(t *testing.T) {
	var out strings.Builder
	s := &shower{w: &out}
	s.record(map[string]any{
		"event": "running", "level": "info", "logger": "task",
		"timestamp": "2026-11-29T16:37:18.980Z", "command": "a < b > c && d",
	})
	got := out.String()
	if !strings.Contains(got, `command="a < b > c && d"`) {
		t.Fatalf("shown line %q does not carry the command as typed", got)
	}
	if !strings.Contains(got, "16:37:18.980 INFO") {
		t.Fatalf("shown line %q lacks the time and level", got)
	}
}
