package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/gcerrors"
)

// fileStore is the local filesystem through fileblob, rooted at "/" so that
// every file:// URL is one key. fileblob writes to a temporary file next to
// the target and renames it into place on success, which gives the
// all-or-nothing write; parent directories are created as needed.
type fileStore struct {
	b *blob.Bucket
}

func openFileStore() (*fileStore, error) {
	b, err := fileblob.OpenBucket("/", &fileblob.Options{
		// Temporary files next to the target: a rename across filesystems
		// (from os.TempDir) would fail.
		NoTempDir: true,
		// Plain files only: no .attrs sidecars next to the user's files.
		Metadata: fileblob.MetadataDontWrite,
	})
	if err != nil {
		return nil, fmt.Errorf("opening the local filesystem: %w", err)
	}
	return &fileStore{b: b}, nil
}

func (s *fileStore) path(key string) string { return "/" + key }

func (s *fileStore) write(ctx context.Context, key string, r io.Reader) error {
	// Cancelling the writer's context before Close is how gocloud aborts a
	// write: fileblob then deletes its temporary file instead of renaming it.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := s.b.NewWriter(wctx, key, &blob.WriterOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, r); err != nil {
		cancel()
		_ = w.Close()
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	// The file is in place; make its bytes durable before anyone renames it
	// to a destination that other systems will read.
	return syncPath(s.path(key))
}

func (s *fileStore) open(ctx context.Context, key string) (io.ReadCloser, error) {
	r, err := s.b.NewReader(ctx, key, nil)
	if err != nil {
		if gcerrors.Code(err) == gcerrors.NotFound {
			return nil, ErrNotFound
		}
		return nil, err
	}
	return r, nil
}

func (s *fileStore) move(_ context.Context, src, dst string, _ int64) error {
	if err := os.Rename(s.path(src), s.path(dst)); err != nil {
		var pe *os.LinkError
		if errors.As(err, &pe) {
			err = pe.Err // the paths are already in our error message
		}
		if errors.Is(err, fs.ErrNotExist) {
			return ErrNotFound
		}
		return err
	}
	// Persist the rename itself.
	return syncPath(filepath.Dir(s.path(dst)))
}

func (s *fileStore) remove(_ context.Context, key string) error {
	err := os.Remove(s.path(key))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (s *fileStore) exists(_ context.Context, key string) (bool, error) {
	fi, err := os.Stat(s.path(key))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	}
	return fi.Mode().IsRegular(), nil
}

func (s *fileStore) close() error { return s.b.Close() }

// syncPath fsyncs a file or directory by path.
func syncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", p, err)
	}
	return nil
}
