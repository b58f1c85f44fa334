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

func openFileStore(context.Context, Location, Options) (Bucket, error) { return newFileStore() }

func newFileStore() (*fileStore, error) {
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

func (s *fileStore) Put(ctx context.Context, key string, r io.Reader) error {
	p, err := s.Upload(ctx, key, r, -1)
	if err != nil {
		return err
	}
	return p.Commit(ctx)
}

// Upload writes r to a temporary file next to key (<key>.<hex>.tmp) and
// holds it there; Commit renames it into place.
func (s *fileStore) Upload(ctx context.Context, key string, r io.Reader, _ int64) (Pending, error) {
	// Cancelling the writer's context before Close is how gocloud aborts a
	// write: fileblob then deletes its temporary file instead of renaming it.
	wctx, cancel := context.WithCancel(ctx)
	w, err := s.b.NewWriter(wctx, key, &blob.WriterOptions{ContentType: "application/octet-stream"})
	if err != nil {
		cancel()
		return nil, err
	}
	p := &filePending{w: w, cancel: cancel, path: s.path(key)}
	_, err = io.Copy(w, r)
	if err == nil {
		err = ctx.Err() // fileblob does not look at it while writing
	}
	if err != nil {
		_ = p.Abort(ctx)
		return nil, err
	}
	return p, nil
}

// filePending is a finished temporary file waiting for its rename.
type filePending struct {
	w      *blob.Writer
	cancel context.CancelFunc
	path   string
}

func (p *filePending) Commit(context.Context) error {
	defer p.cancel()
	if err := p.w.Close(); err != nil {
		return err
	}
	// The file is in place; make its bytes and its name durable before
	// anyone reads it.
	if err := syncPath(p.path); err != nil {
		return err
	}
	return syncPath(filepath.Dir(p.path))
}

func (p *filePending) Abort(context.Context) error {
	p.cancel()
	_ = p.w.Close() // with the context cancelled, this deletes the temporary file
	return nil
}

func (s *fileStore) Check(context.Context) error { return nil }

func (s *fileStore) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	r, err := s.b.NewReader(ctx, key, nil)
	if err != nil {
		if gcerrors.Code(err) == gcerrors.NotFound {
			return nil, ErrNotFound
		}
		return nil, err
	}
	return r, nil
}

func (s *fileStore) Remove(_ context.Context, key string) error {
	err := os.Remove(s.path(key))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (s *fileStore) Exists(_ context.Context, key string) (bool, error) {
	fi, err := os.Stat(s.path(key))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	}
	return fi.Mode().IsRegular(), nil
}

func (s *fileStore) Close() error { return s.b.Close() }

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
