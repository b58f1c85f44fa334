package redact

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode"
)

// derivedIgnorable is Default_Ignorable_Code_Point as DerivedCoreProperties.txt
// derives it, from the standard library's tables of the properties it is
// made of.
func derivedIgnorable(r rune) bool {
	in := unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) || unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Variation_Selector, r)
	out := unicode.Is(unicode.White_Space, r) || (r >= 0xfff9 && r <= 0xfffb) || (r >= 0x13430 && r <= 0x1343f) ||
		unicode.Is(unicode.Prepended_Concatenation_Mark, r)
	return in && !out
}

func TestDefaultIgnorableTable(t *testing.T) {
	var diff []string
	count := 0
	for r := rune(0); r <= unicode.MaxRune; r++ {
		want := derivedIgnorable(r)
		if unicode.Is(defaultIgnorable, r) != want {
			diff = append(diff, fmt.Sprintf("U+%04X (derived: %v)", r, want))
		}
		if want {
			count++
		}
	}
	if len(diff) > 0 || unicode.Version != defaultIgnorableVersion {
		t.Fatalf("defaultIgnorable (Unicode %s) differs from what Go's Unicode %s tables derive at %d code points (first: %v); replace its ranges with:\n%s",
			defaultIgnorableVersion, unicode.Version, len(diff), diff[:min(len(diff), 5)], derivedRanges())
	}
	// DerivedCoreProperties.txt's own total for Unicode 14.0 and 15.0.
	if count != 4174 {
		t.Fatalf("%d code points are Default_Ignorable_Code_Point; Unicode 15.0 has 4174", count)
	}
	for _, r := range []rune{0xad, 0x61c, 0x200b, 0x2066, 0x3164, 0xfe0f, 0xfeff, 0x1d173, 0xe0001, 0xe01ef, 0xe0fff} {
		if !invisibleRune(r) {
			t.Errorf("U+%04X is ignorable", r)
		}
	}
	for _, r := range []rune{'a', ' ', 0xa0, 0x600, 0x2028, 0x1f600, 0x10ffff} {
		if invisibleRune(r) {
			t.Errorf("U+%04X is drawn", r)
		}
	}
}

// derivedRanges prints the derived set as defaultIgnorable's ranges.
func derivedRanges() string {
	var b strings.Builder
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if !derivedIgnorable(r) {
			continue
		}
		lo := r
		for r+1 <= unicode.MaxRune && derivedIgnorable(r+1) {
			r++
		}
		fmt.Fprintf(&b, "\t\t{Lo: 0x%04x, Hi: 0x%04x, Stride: 1},\n", lo, r)
	}
	return b.String()
}

// invisibleRunes are every character Lines drops or looks through,
// one per range: what a random test draws from.
type runeRange struct{ lo, hi rune }

func invisibleRanges() []runeRange {
	var out []runeRange
	for _, r := range defaultIgnorable.R16 {
		out = append(out, runeRange{rune(r.Lo), rune(r.Hi)})
	}
	for _, r := range defaultIgnorable.R32 {
		out = append(out, runeRange{rune(r.Lo), rune(r.Hi)})
	}
	out = append(out, runeRange{0x80, 0x9f}, runeRange{0xfff9, 0xfffb}, runeRange{0x13430, 0x1343f})
	for r := rune(0xa0); r <= 0x3000; r++ {
		if gapRune(r) {
			out = append(out, runeRange{r, r})
		}
	}
	return out
}

func randomInvisible(rng *rand.Rand, ranges []runeRange) string {
	rg := ranges[rng.IntN(len(ranges))]
	return string(rg.lo + rune(rng.IntN(int(rg.hi-rg.lo)+1)))
}

// Issue 29, item 3: a secret printed with one of these inside showed whole
// in the task log and in output_tail; only some invisible characters were
// looked through. A log viewer draws each as nothing (NBSP as a gap).
func TestSecretsAreMaskedThroughEveryIgnorable(t *testing.T) {
	const secret = "s3cr3t-value-42"
	set := New(secret)
	cut := len(secret) / 2
	for _, inside := range []rune{0xfe00, 0xfe0f, 0xe0100, 0xe01ef, 0xe0000, 0xe007f, 0xe0041, 0x061c, 0x3164,
		0x17b4, 0x1d173, 0xfff9, 0xa0, 0x202f, 0x3000} {
		name := fmt.Sprintf("U+%04X", inside)
		printed := "before " + secret[:cut] + string(inside) + secret[cut:] + " after"
		// What a reader sees: the character drawn as nothing, or a gap.
		seen := func(s string) string { return strings.ReplaceAll(s, string(inside), "") }
		if got := set.String(printed); strings.Contains(seen(got), secret) || got != "before *** after" {
			t.Errorf("%s: String gave %q", name, got)
		}
		if got := fmt.Sprint(set.Any(map[string]any{"v": []any{printed}})); strings.Contains(seen(got), secret) || !strings.Contains(got, Mask) {
			t.Errorf("%s: Any gave %q", name, got)
		}
		for _, chunk := range []int{1, 3, 7, 1 << 10} {
			pieces, _ := collect(set, 4, printed+"\n", func() int { return chunk })
			if got := strings.Join(pieces, ""); strings.Contains(seen(got), secret) || !strings.Contains(got, "before ***") {
				t.Errorf("%s, chunks of %d: Lines gave %q", name, chunk, got)
			}
		}
	}
	// A gap stays in the output, as a TAB does; an ignorable character goes.
	pieces, _ := collect(set, 1<<10, "a\u00a0b\u2009c\ufe0fd\n", func() int { return 2 })
	if got := strings.Join(pieces, ""); got != "a\u00a0b\u2009cd" {
		t.Errorf("Lines gave %q", got)
	}
}
