package local

import (
	"regexp"
	"strings"
	"testing"
)

// validName is a loop (no regexp compiled at start-up); it must accept
// exactly what the pattern it replaced accepts.
func TestValidNameMatchesItsPattern(t *testing.T) {
	pattern := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)
	for _, s := range []string{"", "a", "_a", "-a", "a_b-c", "airflow-sandbox-0123456789ab", "a.b", "a/b", "..", "é",
		"a" + strings.Repeat("b", 127), "a" + strings.Repeat("b", 128), strings.Repeat("9", 128)} {
		if got, want := validName(s), pattern.MatchString(s); got != want {
			t.Errorf("validName(%q) = %v, pattern says %v", s, got, want)
		}
	}
}
