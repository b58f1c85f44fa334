package redact

import "unicode"

// defaultIgnorable is Unicode's Default_Ignorable_Code_Point: the code
// points a renderer shows as nothing when it does not support them
// (zero-width characters, bidi and other format controls, variation
// selectors, tag characters, Hangul fillers, unassigned code points
// reserved to be ignorable).
//
// Unicode 15.0.0 (Go's unicode.Version). The standard library has the
// properties DerivedCoreProperties.txt derives it from but not the derived
// set, so it is computed from them as that file says:
//
//	Other_Default_Ignorable_Code_Point + Cf + Variation_Selector
//	  - White_Space - FFF9..FFFB - 13430..1343F - Prepended_Concatenation_Mark
//
// TestDefaultIgnorableTable recomputes it from the stdlib tables and
// prints this table anew when a Go release moves to another Unicode
// version.
var defaultIgnorable = &unicode.RangeTable{
	R16: []unicode.Range16{
		{Lo: 0x00ad, Hi: 0x00ad, Stride: 1},
		{Lo: 0x034f, Hi: 0x034f, Stride: 1},
		{Lo: 0x061c, Hi: 0x061c, Stride: 1},
		{Lo: 0x115f, Hi: 0x1160, Stride: 1},
		{Lo: 0x17b4, Hi: 0x17b5, Stride: 1},
		{Lo: 0x180b, Hi: 0x180f, Stride: 1},
		{Lo: 0x200b, Hi: 0x200f, Stride: 1},
		{Lo: 0x202a, Hi: 0x202e, Stride: 1},
		{Lo: 0x2060, Hi: 0x206f, Stride: 1},
		{Lo: 0x3164, Hi: 0x3164, Stride: 1},
		{Lo: 0xfe00, Hi: 0xfe0f, Stride: 1},
		{Lo: 0xfeff, Hi: 0xfeff, Stride: 1},
		{Lo: 0xffa0, Hi: 0xffa0, Stride: 1},
		{Lo: 0xfff0, Hi: 0xfff8, Stride: 1},
	},
	R32: []unicode.Range32{
		{Lo: 0x1bca0, Hi: 0x1bca3, Stride: 1},
		{Lo: 0x1d173, Hi: 0x1d17a, Stride: 1},
		{Lo: 0xe0000, Hi: 0xe0fff, Stride: 1},
	},
}

// defaultIgnorableVersion is the Unicode version defaultIgnorable was
// computed for.
const defaultIgnorableVersion = "15.0.0"

// invisibleRune: what renders as nothing. The C1 controls; every
// Default_Ignorable_Code_Point; and the format characters that property
// leaves out only because a renderer that does not support them should
// show them (U+FFF9..FFFB interlinear annotation controls, U+13430..1343F
// Egyptian hieroglyph format controls), which log viewers do not support
// and draw as nothing. (The prepended concatenation marks, also format
// characters, are drawn.)
func invisibleRune(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f, r >= 0xfff9 && r <= 0xfffb, r >= 0x13430 && r <= 0x1343f:
		return true
	}
	return unicode.Is(defaultIgnorable, r)
}

// gapRune: a blank other than the ASCII space, which renders as a gap a
// reader reads across as across a TAB: NBSP, the fixed-width spaces
// U+2000..200A, the narrow and medium mathematical spaces, the ideographic
// space, the line and paragraph separators (White_Space beyond Latin-1's
// controls, but OGHAM SPACE MARK, which is drawn as a stroke). A secret
// with one inside still reads whole, so matching looks through them as
// through a TAB; unlike invisible characters they stay in the output.
// The ASCII space does not: matching through it would mask ordinary
// words ("a b c" for "abc") and look at every line twice.
func gapRune(r rune) bool {
	return r >= 0xa0 && r != 0x1680 && unicode.Is(unicode.White_Space, r)
}
