package sandbox

import "sync"

// TailBuffer is an io.Writer that keeps only the last Max bytes written:
// when a command fails, the error is at the end of its output.
type TailBuffer struct {
	Max       int
	mu        sync.Mutex
	buf       []byte
	truncated bool
	total     int64
}

// NewTailBuffer keeps the last max bytes.
func NewTailBuffer(max int) *TailBuffer { return &TailBuffer{Max: max} }

func (t *TailBuffer) Write(p []byte) (int, error) {
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
func (t *TailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// Truncated reports whether bytes were dropped from the front.
func (t *TailBuffer) Truncated() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.truncated
}

// Total is the number of bytes ever written.
func (t *TailBuffer) Total() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}
