package tasks

import (
	"bytes"
	"io"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// maxLogLine bounds one logged line: a command that prints megabytes without
// a newline must not hold them all in memory.
const maxLogLine = 16 << 10

// lineLogger is an io.Writer that logs each complete line of a command's
// output as one log record, as it arrives.
type lineLogger struct {
	mu     sync.Mutex
	log    hclog.Logger
	stream string
	buf    []byte
	red    *redactor
	// tail, when set, receives what is logged, redacted. Feeding the
	// output tail from here rather than from the raw streams keeps a secret
	// whole for the redactor even when the sandbox delivers it in several
	// chunks with the other stream's output in between.
	tail io.Writer
}

func newLineLogger(log hclog.Logger, stream string, red *redactor) *lineLogger {
	return &lineLogger{log: log, stream: stream, red: red}
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		room := maxLogLine - len(l.buf)
		i := bytes.IndexByte(p, '\n')
		switch {
		case i >= 0 && i <= room:
			l.buf = append(l.buf, p[:i]...)
			p = p[i+1:]
			l.emit("\n")
		case i < 0 && len(p) < room:
			l.buf = append(l.buf, p...)
			p = nil
		default: // the line is longer than we keep: log what fits
			l.buf = append(l.buf, p[:room]...)
			p = p[room:]
			l.emitPiece()
		}
	}
	return n, nil
}

// Flush logs a final line that had no newline.
func (l *lineLogger) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.emit("")
	}
}

// emitPiece logs a full buffer that is not a whole line. A secret may
// straddle the cut, where neither piece would show it whole to the
// redactor: the bytes that could start one stay in the buffer for the next
// piece.
func (l *lineLogger) emitPiece() {
	s := l.red.redact(string(l.buf))
	keep := l.red.overlap()
	if keep == 0 || keep > len(s)/2 {
		keep = 0
	}
	l.log.Info(s[:len(s)-keep], "stream", l.stream)
	l.toTail(s[:len(s)-keep])
	l.buf = append(l.buf[:0], s[len(s)-keep:]...)
}

// emit logs the buffered line; end is what ended it ("\n", or "" at Flush).
func (l *lineLogger) emit(end string) {
	line := l.red.redact(string(bytes.TrimSuffix(l.buf, []byte{'\r'})))
	l.buf = l.buf[:0]
	l.log.Info(line, "stream", l.stream)
	l.toTail(line + end)
}

func (l *lineLogger) toTail(s string) {
	if l.tail != nil {
		io.WriteString(l.tail, s)
	}
}
