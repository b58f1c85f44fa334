package storage

import (
	"context"
	"fmt"
	"io"
	"sync"
)

// Bucket is one bucket, container or the local filesystem behind a driver.
// Each method is all-or-nothing at the key it names: a failed write leaves
// nothing there, and an older object stays as it was.
//
// Drivers for gs:// and Azure live in their own packages (storage/gcs,
// storage/azure) and register themselves, so a bundle links only the cloud
// SDKs it imports.
type Bucket interface {
	// Put streams r to key and makes it visible once complete.
	Put(ctx context.Context, key string, r io.Reader) error
	// Upload streams every byte of r toward key but leaves the object
	// invisible until the returned Pending is committed: an S3 multipart
	// upload not yet completed, Azure blocks not yet committed, a GCS
	// resumable upload not yet finalised, a temporary file not yet
	// renamed. size is r's length when known (-1 otherwise), a hint for
	// buffer sizes. On error nothing is left pending.
	Upload(ctx context.Context, key string, r io.Reader, size int64) (Pending, error)
	// Open streams the object at key; a missing object is ErrNotFound.
	Open(ctx context.Context, key string) (io.ReadCloser, error)
	// Exists reports whether key holds an object.
	Exists(ctx context.Context, key string) (bool, error)
	// Remove deletes key; a missing key is not an error.
	Remove(ctx context.Context, key string) error
	// Check fails, saying what to do, when the bucket does not exist or
	// the credentials cannot reach it; it changes nothing.
	Check(ctx context.Context) error
	Close() error
}

// Pending is an upload whose bytes are sent but which is not visible yet.
type Pending interface {
	// Commit makes the object visible at its key, replacing any older one.
	Commit(ctx context.Context) error
	// Abort discards the upload; the key keeps what it held. Safe after a
	// failed Commit.
	Abort(ctx context.Context) error
}

// OpenFunc opens the bucket loc lives in with the credentials in opt.
type OpenFunc func(ctx context.Context, loc Location, opt Options) (Bucket, error)

var (
	driversMu sync.RWMutex
	drivers   = map[string]OpenFunc{"file": openFileStore, "s3": openS3Store}
)

// driverPackages are the packages that register each optional store.
var driverPackages = map[string]string{
	"gs": "github.com/airflow-sandbox/airflow-go-worker/storage/gcs",
	"az": "github.com/airflow-sandbox/airflow-go-worker/storage/azure",
}

// Register makes scheme ("gs", "az") usable; driver packages call it from
// init.
func Register(scheme string, open OpenFunc) {
	driversMu.Lock()
	defer driversMu.Unlock()
	drivers[scheme] = open
}

// openStore opens the bucket (or filesystem) that loc lives in.
func openStore(ctx context.Context, loc Location, opt Options) (Bucket, error) {
	driversMu.RLock()
	open := drivers[loc.Scheme]
	driversMu.RUnlock()
	if open == nil {
		return nil, fmt.Errorf("%s:// URLs need the driver package %s, which this bundle does not link; import it (import _ %q) in the bundle's main package",
			loc.form, driverPackages[loc.Scheme], driverPackages[loc.Scheme])
	}
	return open(ctx, loc, opt)
}
