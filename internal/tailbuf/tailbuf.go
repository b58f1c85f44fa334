// Package tailbuf keeps the end of a stream: when a command fails, its
// error is at the end of its output.
package tailbuf

import "sync"

// Buffer is an io.Writer that keeps only the last Max bytes written.
type Buffer struct {
	Max       int
	mu        sync.Mutex
	buf       []byte
	truncated bool
	total     int64
}

// New keeps the last max bytes.
func New(max int) *Buffer { return &Buffer{Max: max} }

func (t *Buffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total += int64(len(p))
	if t.Max <= 0 {
		t.truncated = t.truncated || len(p) > 0
		return len(p), nil
	}
	if len(p) >= t.Max {
		t.truncated = t.truncated || len(t.buf) > 0 || len(p) > t.Max
		t.buf = append(t.buf[:0], p[len(p)-t.Max:]...)
		return len(p), nil
	}
	if over := len(t.buf) + len(p) - t.Max; over > 0 {
		t.truncated = true
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return len(p), nil
}

// String returns the kept tail.
func (t *Buffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// Truncated reports whether bytes were dropped from the front.
func (t *Buffer) Truncated() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.truncated
}

// Total is the number of bytes ever written.
func (t *Buffer) Total() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}
