package redact

import (
	"strings"
	"unicode/utf8"
)

// Output is masked as it is rendered. A terminal or a log viewer shows no
// trace of an ANSI escape sequence, a CR, a NUL or a zero-width character,
// so a command that printed a secret with one of them inside it ("s3cr\e[0m
// 3t") showed the whole secret while its bytes matched no pattern. Masking
// therefore also matches against the visible view of the text (invisible
// units removed) and masks the original bytes each match spans, invisible
// ones included. What is invisible: ignorable.go. A TAB, NBSP and the
// other blanks but the ASCII space count as invisible too: in a table or
// between two halves of a secret they are only a gap.

// invisibleAt returns the length of the invisible unit starting at s[i]
// (0 when s[i] starts a visible character or a newline), and whether the
// unit is complete: an escape sequence or a character cut at the end of s
// (a stream's chunk) may go on in the next one.
func invisibleAt(s string, i int) (n int, complete bool) {
	b := s[i]
	switch {
	case b == '\n':
		return 0, true
	case b == 0x1b:
		return escapeAt(s, i)
	case b < 0x20 || b == 0x7f:
		return 1, true
	case b < 0x80:
		return 0, true
	}
	if !utf8.FullRuneInString(s[i:]) {
		return len(s) - i, false
	}
	r, size := utf8.DecodeRuneInString(s[i:])
	if invisibleRune(r) || gapRune(r) {
		return size, true
	}
	return 0, true
}

// gapUnit reports whether the invisible unit u is a gap (a TAB or a
// gapRune): matched through, but kept in the output.
func gapUnit(u string) bool {
	if u == "\t" {
		return true
	}
	if len(u) < 2 || u[0] < utf8.RuneSelf {
		return false
	}
	r, _ := utf8.DecodeRuneInString(u)
	return gapRune(r)
}

// maxEscape bounds an escape sequence: a longer one is taken to end there,
// so an unterminated string sequence cannot hide what follows it.
const maxEscape = 4096

// escapeAt measures the escape sequence at s[i] (ECMA-48): CSI (ESC [
// parameters, intermediates, a final byte), the string sequences (OSC,
// DCS, SOS, PM, APC: up to BEL or ESC \), or ESC, intermediates and a
// final byte.
func escapeAt(s string, i int) (int, bool) {
	end := min(len(s), i+maxEscape)
	j := i + 1
	if j >= end {
		return end - i, end-i >= maxEscape
	}
	switch s[j] {
	case '[':
		for j++; j < end; j++ {
			if c := s[j]; c >= 0x40 && c <= 0x7e {
				return j + 1 - i, true
			} else if c < 0x20 || c > 0x3f {
				return j - i, true // malformed: ESC [ and its parameters
			}
		}
	case ']', 'P', 'X', '^', '_':
		for j++; j < end; j++ {
			if s[j] == 0x07 {
				return j + 1 - i, true
			}
			if s[j] == 0x1b && j+1 < len(s) && s[j+1] == '\\' {
				return j + 2 - i, true
			}
		}
	default:
		for ; j < end; j++ {
			if c := s[j]; c >= 0x30 && c <= 0x7e {
				return j + 1 - i, true
			} else if c < 0x20 || c > 0x2f {
				return j - i, true // ESC alone
			}
		}
	}
	return end - i, end-i >= maxEscape
}

// visibleView returns text without its invisible units, and for each byte
// of the view the index of that byte in text; ok is false (and the view
// is text itself) when text has none.
func visibleView(text string) (view string, at []int, ok bool) {
	var b strings.Builder
	for i := 0; i < len(text); {
		n, _ := invisibleAt(text, i)
		if n > 0 && !ok {
			ok = true
			b.Grow(len(text))
			b.WriteString(text[:i])
			at = make([]int, i, len(text))
			for k := range i {
				at[k] = k
			}
		}
		if n > 0 {
			i += n
			continue
		}
		size := 1
		if text[i] >= utf8.RuneSelf {
			_, size = utf8.DecodeRuneInString(text[i:])
		}
		if ok {
			b.WriteString(text[i : i+size])
			for k := range size {
				at = append(at, i+k)
			}
		}
		i += size
	}
	if !ok {
		return text, nil, false
	}
	return b.String(), at, true
}

// visibleForm is a secret as it would have to appear in a visible view.
func visibleForm(v string) string {
	view, _, _ := visibleView(v)
	return view
}
