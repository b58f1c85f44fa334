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

func TestIsAndSuffixed(t *testing.T) {
	for _, c := range []struct {
		s        string
		min, max int
		want     bool
	}{
		{String(6), 12, 12, true}, {"0123456789ab", 12, 12, true}, {"0123456789aB", 12, 12, false},
		{"0123456789a", 12, 12, false}, {"0123456789abc", 12, 12, false}, {"", 0, 4, true}, {"g", 0, 4, false},
	} {
		if got := Is(c.s, c.min, c.max); got != c.want {
			t.Errorf("Is(%q, %d, %d) = %v", c.s, c.min, c.max, got)
		}
	}
	for _, c := range []struct {
		name string
		want bool
	}{
		{"out.csv.0123456789ab.partial", true}, {"0123456789ab.partial", false}, {"x.0123456789ab.partial.tmp", false},
		{"x.0123456789a.partial", false}, {"x.0123456789abc.partial", false}, {"x.0123456789AB.partial", false},
		{"x.y.0123456789ab.partial", true}, {"x.0123456789ab.y.partial", false}, {"x.0123456789ab.partialx", false},
	} {
		if got := Suffixed(c.name, ".partial", 12, 12); got != c.want {
			t.Errorf("Suffixed(%q, .partial, 12, 12) = %v", c.name, got)
		}
	}
}
