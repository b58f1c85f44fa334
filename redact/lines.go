package redact

import (
	"bytes"
	"sync"
	"unicode/utf8"
)

// Lines is an io.Writer that splits a stream (a command's stdout, say) into
// lines and hands each one, masked, to emit as it completes. A line longer
// than maxLine goes out in pieces of about maxLine bytes (newline false);
// each piece stops short of bytes that could begin a secret the next piece
// completes, so a secret cut by a pipe's chunking or by a piece boundary is
// still masked whole. Memory is bounded by max(maxLine, 2 × the longest
// secret, plus the gaps among it), whatever the stream.
//
// What it emits is the text as rendered: escape sequences, control
// characters (CR included) and the characters that render as nothing
// (Default_Ignorable_Code_Point: ignorable.go) are dropped, so what one
// hid inside a secret cannot keep it from being masked, and cannot make
// the buffer hold more than the bound. Gaps (a TAB, NBSP, the other
// blanks but the ASCII space) stay, at most maxGapRun in a row; matching
// looks through them (visible.go).
type Lines struct {
	mu      sync.Mutex
	set     *Set
	maxLine int
	buf     []byte
	emit    func(text string, newline bool)
	pend    []byte // an invisible unit cut at the end of the last Write
	gaps    int    // gaps kept in a row so far
}

// maxGapRun bounds a run of gaps: a secret spelled with gaps between its
// characters is at most 1+maxGapRun×3 (a gap's UTF-8 length) times its
// length.
const maxGapRun = 8

// NewLines returns a Lines writer masking with set (nil: nothing masked).
// emit gets each line without its "\n" (and without CRs), with
// newline true; pieces of an overlong line and a last unterminated line
// come with newline false.
func NewLines(set *Set, maxLine int, emit func(text string, newline bool)) *Lines {
	if maxLine < 1 {
		maxLine = 1
	}
	return &Lines{set: set, maxLine: maxLine, emit: emit}
}

// Write never fails.
func (l *Lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	p = l.visible(p)
	for len(p) > 0 {
		limit := l.limit()
		room := limit - len(l.buf)
		i := bytes.IndexByte(p, '\n')
		switch {
		case i >= 0 && i <= room:
			l.buf = append(l.buf, p[:i]...)
			p = p[i+1:]
			l.line()
		case i < 0 && len(p) < room:
			l.buf = append(l.buf, p...)
			p = nil
		default: // longer than we keep: send what is safe, keep the rest
			l.buf = append(l.buf, p[:room]...)
			p = p[room:]
			l.piece()
		}
	}
	return n, nil
}

// limit is how many bytes of one line are buffered before a piece goes
// out: at least twice the longest secret, so a piece can always hold one
// whole and still make progress, and at least 2, so a held-back "\r" never
// fills the buffer alone.
func (l *Lines) limit() int {
	// Gaps count for nothing in the visible text a secret is matched in:
	// room for them comes on top (at most maxGapRun per visible byte).
	return max(l.maxLine, 2*l.set.MaxLen()+gapBytes(l.buf), 2)
}

// gapBytes is how many bytes of b are gaps.
func gapBytes(b []byte) int {
	n := bytes.Count(b, []byte{'\t'})
	for i := 0; i < len(b); i++ {
		// Every gapRune starts with one of these bytes in UTF-8.
		if c := b[i]; c == 0xc2 || c == 0xe2 || c == 0xe3 {
			r, size := utf8.DecodeRune(b[i:])
			if gapRune(r) {
				n += size
			}
			i += size - 1
		}
	}
	return n
}

// visible returns p as rendered: invisible units dropped, gap runs cut to
// maxGapRun; a unit cut at the end of p waits for the next Write.
func (l *Lines) visible(p []byte) []byte {
	s := string(append(l.pend, p...))
	l.pend = l.pend[:0]
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		n, complete := invisibleAt(s, i)
		switch {
		case !complete:
			l.pend = append(l.pend, s[i:]...)
			return out
		case n > 0 && gapUnit(s[i:i+n]):
			if l.gaps < maxGapRun {
				out = append(out, s[i:i+n]...)
			}
			l.gaps++
			i += n
			continue
		case n > 0:
			i += n
			continue
		}
		size := 1
		if s[i] >= utf8.RuneSelf {
			_, size = utf8.DecodeRuneInString(s[i:])
		}
		out = append(out, s[i:i+size]...)
		l.gaps = 0
		i += size
	}
	return out
}

func (l *Lines) line() {
	text := string(l.buf)
	l.buf = l.buf[:0]
	l.emit(l.set.String(text), true)
}

func (l *Lines) piece() {
	text := l.buf
	out, used := mask(string(text), l.set.patterns(), false)
	if used == 0 {
		// All of it could still begin a secret (gaps fill it): keep it;
		// the limit has grown by those gaps.
		return
	}
	l.buf = append(l.buf[:0], l.buf[used:]...)
	l.emit(out, false)
}

// Flush emits a last line that had no newline.
func (l *Lines) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pend = l.pend[:0] // an escape sequence cut by the end of the stream
	if len(l.buf) > 0 {
		text := string(l.buf)
		l.buf = l.buf[:0]
		l.emit(l.set.String(text), false)
	}
}
