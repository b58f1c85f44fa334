package footer

import (
	"regexp"
	"testing"
)

// plainKey is a loop (no regexp compiled at start-up); it must accept
// exactly what the pattern it replaced accepts.
func TestPlainKeyMatchesItsPattern(t *testing.T) {
	pattern := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)
	for _, k := range []string{"", "a", "_", "9a", "a9", "a.b-c_d", "-a", ".a", "a b", "a:b", "é", "dags", "A_1.x-"} {
		if got, want := plainKey(k), pattern.MatchString(k); got != want {
			t.Errorf("plainKey(%q) = %v, pattern says %v", k, got, want)
		}
	}
}
