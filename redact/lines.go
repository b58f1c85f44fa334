package redact

import (
	"bytes"
	"sync"
)

// Lines is an io.Writer that splits a stream (a command's stdout, say) into
// lines and hands each one, masked, to emit as it completes. A line longer
// than maxLine goes out in pieces of about maxLine bytes (newline false);
// each piece stops short of bytes that could begin a secret the next piece
// completes, so a secret cut by a pipe's chunking or by a piece boundary is
// still masked whole. Memory is bounded by max(maxLine, 2 × the longest
// secret), whatever the stream.
type Lines struct {
	mu      sync.Mutex
	set     *Set
	maxLine int
	buf     []byte
	emit    func(text string, newline bool)
}

// NewLines returns a Lines writer masking with set (nil: nothing masked).
// emit gets each line without its "\n" (and a trailing "\r" removed), with
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
func (l *Lines) limit() int { return max(l.maxLine, 2*l.set.MaxLen(), 2) }

func (l *Lines) line() {
	text := string(bytes.TrimSuffix(l.buf, []byte{'\r'}))
	l.buf = l.buf[:0]
	l.emit(l.set.String(text), true)
}

func (l *Lines) piece() {
	text := l.buf
	if n := len(text); n > 0 && text[n-1] == '\r' {
		text = text[:n-1] // it may end the line: line() trims it then
	}
	out, used := mask(string(text), l.set.patterns(), false)
	if used == 0 { // cannot happen with limit >= 2*MaxLen; never stall
		out, used = mask(string(l.buf), l.set.patterns(), true)
	}
	l.buf = append(l.buf[:0], l.buf[used:]...)
	l.emit(out, false)
}

// Flush emits a last line that had no newline.
func (l *Lines) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		text := string(l.buf)
		l.buf = l.buf[:0]
		l.emit(l.set.String(text), false)
	}
}
