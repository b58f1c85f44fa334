package tasks

import (
	"io"

	"github.com/hashicorp/go-hclog"

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
	tail io.Writer
}

func newLineLogger(log hclog.Logger, stream string, red *redact.Set) *lineLogger {
	l := &lineLogger{}
	l.lines = redact.NewLines(red, maxLogLine, func(text string, newline bool) {
		log.Info(text, "stream", stream)
		if l.tail != nil {
			if newline {
				text += "\n"
			}
			io.WriteString(l.tail, text)
		}
	})
	return l
}

func (l *lineLogger) Write(p []byte) (int, error) { return l.lines.Write(p) }

// Flush logs a final line that had no newline.
func (l *lineLogger) Flush() { l.lines.Flush() }
