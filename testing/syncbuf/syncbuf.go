// Package syncbuf is a bytes.Buffer that concurrent writers (a logger, a
// child's stdout and stderr) may share, for tests to read back.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer collects what is written to it; safe for concurrent use.
type Buffer struct {
	// OnWrite, when set, sees every write as it arrives (a test reacting
	// to a log line), under the buffer's lock.
	OnWrite func(string)

	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.OnWrite != nil {
		b.OnWrite(string(p))
	}
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Reset empties the buffer.
func (b *Buffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}
