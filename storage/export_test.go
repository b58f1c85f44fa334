package storage

import (
	"context"
	"io"
)

// Hooks for the external tests (package storage_test), which cannot reach
// unexported names.

// NewFileStoreForTest opens the file:// store directly.
func NewFileStoreForTest() (Driver, error) { return fileStore{}, nil }

// InjectStoreForTest makes h use b as the file:// store.
func InjectStoreForTest(h *Handle, b Driver) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buckets[bucketKey{scheme: "file"}] = &bucket{d: b}
}

// The steps a URL goes through, for this package's tests: parsed by
// Default and used through a handle of its own.

func openURL(ctx context.Context, raw string, opt Options) (io.ReadCloser, error) {
	loc, err := Default.Parse(raw)
	if err != nil {
		return nil, err
	}
	h := Default.NewHandle(opt)
	rc, err := h.Open(ctx, loc)
	if err != nil {
		h.Close()
		return nil, err
	}
	return handleReader{rc, h}, nil
}

// handleReader closes its handle with the reader.
type handleReader struct {
	io.ReadCloser
	h *Handle
}

func (r handleReader) Close() error {
	err := r.ReadCloser.Close()
	r.h.Close()
	return err
}

func putURL(ctx context.Context, raw string, r io.Reader, opt Options) (Written, error) {
	loc, err := Default.Parse(raw)
	if err != nil {
		return Written{}, err
	}
	h := Default.NewHandle(opt)
	defer h.Close()
	return h.Put(ctx, loc, r)
}

func checkURL(ctx context.Context, raw string, forRead bool) error {
	loc, err := Default.Parse(raw)
	if err != nil {
		return err
	}
	h := Default.NewHandle(Options{})
	defer h.Close()
	return h.Check(ctx, loc, forRead)
}

func listURL(ctx context.Context, raw, match string, max int) ([]Listed, error) {
	loc, err := Default.ParsePrefix(raw)
	if err != nil {
		return nil, err
	}
	h := Default.NewHandle(Options{})
	defer h.Close()
	return h.List(ctx, loc, match, max)
}
