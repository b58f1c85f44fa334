package tasks

import (
	"io"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/internal/tailbuf"
	"github.com/airflow-sandbox/airflow-go-worker/redact"
)

// maxLogLine bounds one logged line: a command that prints megabytes without
// a newline must not hold them all in memory.
const maxLogLine = 16 << 10

// lineLogger is an io.Writer that logs each complete line of a command's
// output as one log record, as it arrives, with the sandbox's secrets
// masked (redact.Lines: lines of multi-line secrets, secrets cut across
// chunks or across the pieces of an overlong line).
type lineLogger struct {
	lines *redact.Lines
	// tail, when set, receives what is logged, redacted. Feeding the
	// output tail from here rather than from the raw streams keeps a secret
	// whole for the redactor even when the sandbox delivers it in several
	// chunks with the other stream's output in between.
	tail *outputTail
	// stream names this logger's stream in the tail.
	stream string
	// budget, when set, caps what reaches the log (loglimit.go); the
	// tail gets every line.
	budget *logBudget
}

// outputTail is the tail of a command's stdout and stderr, interleaved as
// their lines were logged. Text from one stream never runs on into the
// other's on one line: half a secret printed to stdout and the rest to
// stderr, each without a newline, would otherwise read as the whole secret.
type outputTail struct {
	mu     sync.Mutex
	buf    *tailbuf.Buffer
	last   string // the stream whose text ends the tail
	inLine bool   // and that text did not end its line
}

func newOutputTail(n int) *outputTail { return &outputTail{buf: tailbuf.New(n)} }

func (t *outputTail) add(stream, text string, newline bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.inLine && t.last != stream {
		_, _ = io.WriteString(t.buf, "\n") // a buffer in memory
	}
	if newline {
		text += "\n"
	}
	_, _ = io.WriteString(t.buf, text)
	t.last, t.inLine = stream, !newline
}

func newLineLogger(log hclog.Logger, stream string, red *redact.Set) *lineLogger {
	l := &lineLogger{stream: stream}
	l.lines = redact.NewLines(red, maxLogLine, func(text string, newline bool) {
		if l.budget.take(log, len(text)) {
			log.Info(text, "stream", stream)
		}
		if l.tail != nil {
			l.tail.add(stream, text, newline)
		}
	})
	return l
}

func (l *lineLogger) Write(p []byte) (int, error) { return l.lines.Write(p) }

// Flush logs a final line that had no newline.
func (l *lineLogger) Flush() { l.lines.Flush() }
