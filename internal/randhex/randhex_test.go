package randhex

import "testing"

func TestStringIsHexOfTheLengthAndRandom(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		s := String(6)
		if len(s) != 12 {
			t.Fatalf("String(6) = %q, want 12 characters", s)
		}
		for _, c := range s {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				t.Fatalf("String(6) = %q, not lower-case hex", s)
			}
		}
		if seen[s] {
			t.Fatalf("String(6) repeated %q", s)
		}
		seen[s] = true
	}
}
