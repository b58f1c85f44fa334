package storage

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
)

// Driver is what a store implements, for one bucket, container or the
// local filesystem (Registration.Open opens one): the interface, as
// sandbox/driver.Driver is a sandbox backend's. Each method is
// all-or-nothing at the key it names: a failed write leaves nothing there,
// and an older object stays as it was.
//
// Drivers for s3://, gs:// and Azure live in their own packages
// (storage/s3, storage/gcs, storage/azure) and register themselves, so a
// bundle links only the cloud SDKs it imports.
type Driver interface {
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

// Lister is a Driver that can list its objects by key prefix, for List
// (the list task: "convert each object under this prefix"). Every store
// this module ships implements it.
type Lister interface {
	// List calls each, in any order, for every object whose key starts
	// with prefix ("" for all), until each returns false; it returns the
	// first error of the listing itself. It lists objects only: no
	// directory placeholders (keys ending in "/"), no uploads that are not
	// complete. A missing bucket is an error wrapping ErrNoBucket.
	List(ctx context.Context, prefix string, each func(Object) bool) error
}

// Object is one object a listing found.
type Object struct {
	Key      string
	Size     int64
	Modified time.Time
}

// Pending is an upload whose bytes are sent but which is not visible yet.
type Pending interface {
	// Commit makes the object visible at its key, replacing any older one.
	Commit(ctx context.Context) error
	// Abort discards the upload; the key keeps what it held. Safe after a
	// failed Commit.
	Abort(ctx context.Context) error
}

// OpenFunc opens one bucket (container; "" for a store without buckets,
// such as file://) with creds, the store's credentials as its
// Registration.FromConnection parsed them, or nil for its default
// credentials. Drivers read their own type with CredentialsAs. A Handle
// calls it once per bucket and connection, the first time a location there
// is used.
type OpenFunc func(ctx context.Context, bucket string, creds Credentials) (Driver, error)

// Credentials are one store's resolved connection, as its driver parsed it
// (*s3.AWSConfig, *gcs.Config, *azure.Config): opaque to package storage and
// its callers, which only hand them to Handle.Connect.
type Credentials interface {
	// Secrets are the values a secret masker must hide, keyed by what
	// each is ("private key"); empty values are ignored.
	Secrets() map[string]string
}

// Registration is what a store package registers: the URL schemes that name it
// and how to read its URLs, the Airflow connection types that reach it and
// the adapter reading them, and how to open a bucket. A new store is its
// own package plus one Register call; this package names no store but
// file://.
type Registration struct {
	// Scheme is the store's name in Location.Scheme and Handle.Connect
	// ("gs").
	Scheme string
	// Forms are the URL schemes that name the store, the canonical one
	// first ("gs", "gcs"); empty means Scheme alone.
	Forms []string
	// ParseURL reads a URL of one of Forms into a Location (Scheme and the
	// key's checks are filled in after); its errors follow the URL in a
	// message ("has a port; ..."). Nil means ParseBucketURL's
	// scheme://[conn_id@]bucket/key.
	ParseURL func(u *url.URL) (Location, error)
	// Example is a URL of the store for messages; default
	// "<Forms[0]>://bucket/key".
	Example string
	// Refuse maps URL schemes users reach for that name this store in a
	// way it cannot honour to what to write instead (Hadoop's wasb://).
	Refuse map[string]string
	// ConnTypes are the Airflow connection types it accepts, the one to
	// create first ("google_cloud_platform", "gcp"). A connection with no
	// type is accepted too.
	ConnTypes []string
	// FromConnection parses a connection of one of ConnTypes; its errors
	// name the connection and field, never a secret.
	FromConnection func(connections.Connection) (Credentials, error)
	// Open opens a bucket.
	Open OpenFunc
	// Sweep, when set, clears a prefix of the store of what interrupted
	// transfers left (Registry.Sweep); a store without it cannot be swept.
	Sweep SweepFunc
}

// forms are the URL schemes of d, the canonical one first.
func (d Registration) forms() []string {
	if len(d.Forms) == 0 {
		return []string{d.Scheme}
	}
	return d.Forms
}

func (d Registration) example() string {
	if d.Example != "" {
		return d.Example
	}
	return d.forms()[0] + "://bucket/key"
}

// parse reads u with the driver's ParseURL.
func (d Registration) parse(u *url.URL) (Location, error) {
	if d.ParseURL != nil {
		return d.ParseURL(u)
	}
	connType := "the store's"
	if len(d.ConnTypes) > 0 {
		connType = d.ConnTypes[0]
	}
	return ParseBucketURL(u, connType, "bucket")
}

// describe names the store's URL forms ("gs://, gcs://").
func (d Registration) describe() string {
	fs := d.forms()
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f + "://"
	}
	return strings.Join(out, ", ")
}

// Adapt turns a connection adapter that returns the driver's config T into
// Registration.FromConnection, which hands out *T (what CredentialsAs reads).
func Adapt[T any, P interface {
	*T
	Credentials
}](parse func(connections.Connection) (T, error)) func(connections.Connection) (Credentials, error) {
	return func(c connections.Connection) (Credentials, error) {
		cfg, err := parse(c)
		if err != nil {
			return nil, err
		}
		return P(&cfg), nil
	}
}

// CredentialsAs is creds as the driver's own type T (a pointer): the zero T
// when creds is nil (the store's default credentials). Drivers call it in
// Open; credentials parsed for another store are an error.
func CredentialsAs[T Credentials](creds Credentials) (T, error) {
	var zero T
	if creds == nil {
		return zero, nil
	}
	t, ok := creds.(T)
	if !ok {
		return zero, fmt.Errorf("the credentials given are a %T, not the %T this store reads; parse the connection with the store's own Registry.FromConnection", creds, zero)
	}
	return t, nil
}
