package storage

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
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

// unlinkedHint says how to get a binary that links a store this one does
// not (SetUnlinkedHint).
var unlinkedHint func(scheme string) string

// SetUnlinkedHint sets what a URL of a store this binary does not link is
// told: hint gets the store ("gs", "az") and returns the build command that
// adds it (the standard binary chooses its stores with build tags), or ""
// to keep the generic advice (import the driver package).
func SetUnlinkedHint(hint func(scheme string) string) {
	driversMu.Lock()
	defer driversMu.Unlock()
	unlinkedHint = hint
}

// Schemes lists the stores this binary links, sorted ("az", "file", "gs",
// "s3").
func Schemes() []string {
	driversMu.RLock()
	defer driversMu.RUnlock()
	return slices.Sorted(maps.Keys(drivers))
}

// RequireLinked fails when raw is a URL of a store this binary does not
// link, with what to do; it is nil for any other URL, valid or not
// (ParseURL explains what is wrong with those). Bundle configs are checked
// with it when they load, so such a config is refused when packed.
func RequireLinked(raw string) error {
	loc, err := parseURL(raw)
	if err != nil {
		return nil
	}
	driversMu.RLock()
	_, ok := drivers[loc.Scheme]
	driversMu.RUnlock()
	if ok {
		return nil
	}
	return unlinked(loc)
}

func unlinked(loc Location) error {
	driversMu.RLock()
	hint := unlinkedHint
	driversMu.RUnlock()
	if hint != nil {
		if how := hint(loc.Scheme); how != "" {
			return fmt.Errorf("%s:// URLs need the %s store, which is not linked into this binary (it links %s); %s",
				loc.form, storeName[loc.Scheme], strings.Join(Schemes(), ", "), how)
		}
	}
	return fmt.Errorf("%s:// URLs need the driver package %s, which this bundle does not link; import it (import _ %q) in the bundle's main package",
		loc.form, driverPackages[loc.Scheme], driverPackages[loc.Scheme])
}

// storeName names the optional stores as their build options do.
var storeName = map[string]string{"gs": "gcs", "az": "azure"}

// openStore opens the bucket (or filesystem) that loc lives in.
func openStore(ctx context.Context, loc Location, opt Options) (Bucket, error) {
	driversMu.RLock()
	open := drivers[loc.Scheme]
	driversMu.RUnlock()
	if open == nil {
		return nil, unlinked(loc)
	}
	return open(ctx, loc, opt)
}
