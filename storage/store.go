package storage

import (
	"context"
	"fmt"
	"io"
)

// store is one bucket (or the local filesystem) behind a driver. Each method
// is all-or-nothing at the key it names: a failed write leaves nothing there.
type store interface {
	// write streams r to key. On any error nothing exists at key.
	write(ctx context.Context, key string, r io.Reader) error
	// open streams the object at key; a missing object is ErrNotFound.
	open(ctx context.Context, key string) (io.ReadCloser, error)
	// move puts the object at src under dst and removes src: a rename on a
	// filesystem, a server-side copy then delete on S3. size is the object's
	// size (S3 needs it to choose a single or multipart copy).
	move(ctx context.Context, src, dst string, size int64) error
	// remove deletes key; a missing key is not an error.
	remove(ctx context.Context, key string) error
	// exists reports whether key holds an object.
	exists(ctx context.Context, key string) (bool, error)
	close() error
}

// openStore opens the bucket (or filesystem) that loc lives in.
func openStore(ctx context.Context, loc location, opt Options) (store, error) {
	switch loc.scheme {
	case "file":
		return openFileStore()
	case "s3":
		return openS3Store(ctx, loc, opt)
	}
	return nil, fmt.Errorf("unsupported scheme %s://; %s", loc.scheme, supportedSchemes)
}
