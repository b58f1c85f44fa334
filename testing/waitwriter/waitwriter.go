// Package waitwriter gives tests an io.Writer that signals when a string
// first appears in what was written, so a test can wait for a log line or a
// child's output instead of sleeping.
package waitwriter

import (
	"bytes"
	"strings"
	"sync"
)

// Writer collects everything written to it and closes Seen once Want
// appears. Safe for concurrent writers.
type Writer struct {
	want string
	seen chan struct{}
	once sync.Once
	mu   sync.Mutex
	buf  bytes.Buffer
}

// New returns a Writer waiting for want.
func New(want string) *Writer { return &Writer{want: want, seen: make(chan struct{})} }

func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// Seen is closed once the wanted string has been written.
func (w *Writer) Seen() <-chan struct{} { return w.seen }

// String returns everything written so far.
func (w *Writer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
