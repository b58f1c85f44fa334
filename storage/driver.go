package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
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

// OpenFunc opens the bucket loc lives in with the credentials in opt.
type OpenFunc func(ctx context.Context, loc Location, opt Options) (Driver, error)

// Credentials are one store's resolved connection, as its driver parsed it
// (*s3.AWSConfig, *gcs.Config, *azure.Config): opaque to package storage and
// its callers, which only pass them back in Options.Credentials.
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
	// Scheme is the store's name in Location.Scheme and
	// Options.Credentials ("gs").
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
	// Open opens a bucket, with Options.Credentials[Scheme] (nil: the
	// store's default credentials).
	Open OpenFunc
	// Sweep, when set, clears a prefix of the store of what interrupted
	// transfers left (Sweep); a store without it cannot be swept.
	Sweep SweepFunc
}

var (
	driversMu sync.RWMutex
	drivers   = map[string]Registration{}
	forms     = map[string]string{} // URL scheme -> store
	refused   = map[string]string{} // URL scheme -> what to write instead
)

func init() { Register(fileRegistration) }

// Register makes a store usable; driver packages call it from init. It
// panics on a driver without a scheme, Open or FromConnection, or a
// scheme or URL form registered twice: programming errors that must fail
// at start-up.
func Register(d Registration) {
	if d.Scheme == "" || d.Open == nil || (d.FromConnection == nil) != (len(d.ConnTypes) == 0) {
		panic(fmt.Sprintf("storage: driver %q needs a scheme, Open, and connection types with FromConnection", d.Scheme))
	}
	driversMu.Lock()
	defer driversMu.Unlock()
	if _, dup := drivers[d.Scheme]; dup {
		panic(fmt.Sprintf("storage: driver %q registered twice", d.Scheme))
	}
	for _, f := range append(d.forms(), slices.Collect(maps.Keys(d.Refuse))...) {
		f = strings.ToLower(f)
		if other, dup := forms[f]; dup {
			panic(fmt.Sprintf("storage: URL scheme %s:// of driver %q is driver %q's already", f, d.Scheme, other))
		}
		if _, dup := refused[f]; dup {
			panic(fmt.Sprintf("storage: URL scheme %s:// of driver %q is refused by another driver", f, d.Scheme))
		}
	}
	drivers[d.Scheme] = d
	for _, f := range d.forms() {
		forms[strings.ToLower(f)] = d.Scheme
	}
	for f, why := range d.Refuse {
		refused[strings.ToLower(f)] = why
	}
}

// Lookup is the registration of store scheme ("gs"), as
// registry.Registry.Lookup is a sandbox backend's.
func Lookup(scheme string) (Registration, bool) {
	driversMu.RLock()
	defer driversMu.RUnlock()
	d, ok := drivers[scheme]
	return d, ok
}

// driverFor is the driver of URL scheme form, or why there is none.
func driverFor(form string) (Registration, error) {
	driversMu.RLock()
	d, ok := drivers[forms[form]]
	why, isRefused := refused[form]
	driversMu.RUnlock()
	switch {
	case ok:
		return d, nil
	case isRefused:
		return Registration{}, errors.New(why)
	}
	return Registration{}, unlinked(form)
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

// ConnType is the Airflow connection type to create for a store ("" for
// file:// and stores that take none).
func ConnType(scheme string) string {
	if d, ok := Lookup(scheme); ok && len(d.ConnTypes) > 0 {
		return d.ConnTypes[0]
	}
	return ""
}

// FromConnection parses Airflow connection c for the store scheme ("s3",
// "gs", "az": a Location's Scheme) with the store's own adapter, after
// checking that its type is one the store accepts. Its errors are final:
// the connection has to be fixed.
func FromConnection(scheme string, c connections.Connection) (Credentials, error) {
	d, ok := Lookup(scheme)
	if !ok {
		return nil, final.Errorf("no store %q is linked into this binary (it links %s)", scheme, strings.Join(Names(), ", "))
	}
	if d.FromConnection == nil {
		return nil, final.Errorf("%s URLs take no connection; remove the connection %q from the task", d.describe(), c.ConnID)
	}
	if t := strings.ToLower(c.ConnType); t != "" && !slices.Contains(d.ConnTypes, t) {
		return nil, final.Errorf("connection %q has type %q, not %s; %s URLs need %s connection", c.ConnID, c.ConnType, d.ConnTypes[0], d.describe(), article(d.ConnTypes[0]))
	}
	cfg, err := d.FromConnection(c)
	return cfg, final.Mark(err)
}

// describe names the store's URL forms ("gs:// and gcs://").
func (d Registration) describe() string {
	fs := d.forms()
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f + "://"
	}
	return strings.Join(out, ", ")
}

// Adapt turns a connection adapter that returns the driver's config T into
// Registration.FromConnection, which hands out *T (what CredentialsFor reads).
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

// CredentialsFor is opt's credentials for scheme as the driver's own type
// T (a pointer); the zero T when opt holds none. Drivers call it in Open.
func CredentialsFor[T Credentials](opt Options, scheme string) (T, error) {
	var zero T
	c, ok := opt.Credentials[scheme]
	if !ok || c == nil {
		return zero, nil
	}
	t, ok := c.(T)
	if !ok {
		return zero, fmt.Errorf("Options.Credentials[%q] holds %T, not the %T its driver reads; parse the connection with storage.FromConnection(%q, conn)", scheme, c, zero, scheme)
	}
	return t, nil
}

// unlinkedHint names the store a URL scheme this binary does not link
// belongs to and how to get a binary that links it (SetUnlinkedHint).
var unlinkedHint func(form string) (store, how string)

// SetUnlinkedHint sets what a URL of a store this binary does not link is
// told: hint gets the URL scheme ("gcs", "abfs") and returns the store's
// name and the build command that adds it (the standard binary chooses its
// stores with build tags), or "" for a scheme it does not know.
func SetUnlinkedHint(hint func(form string) (store, how string)) {
	driversMu.Lock()
	defer driversMu.Unlock()
	unlinkedHint = hint
}

// Names lists the stores this binary links, sorted ("az", "file", "gs",
// "s3"), as registry.Registry.Names lists the sandbox backends.
func Names() []string {
	driversMu.RLock()
	defer driversMu.RUnlock()
	return slices.Sorted(maps.Keys(drivers))
}

// RequireLinked fails when raw is a URL whose scheme no store this binary
// links reads, saying what to do; it is nil for a URL a linked store reads,
// valid or not (ParseURL explains what is wrong with those), and for text
// that is no URL. Bundle configs are checked with it when they load, so
// such a config is refused when packed.
func RequireLinked(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return nil
	}
	if _, err := driverFor(strings.ToLower(u.Scheme)); err != nil {
		return final.Mark(err)
	}
	return nil
}

// unlinked is the error for URL scheme form, which no linked store reads.
func unlinked(form string) error {
	driversMu.RLock()
	hint := unlinkedHint
	driversMu.RUnlock()
	if hint != nil {
		if store, how := hint(form); how != "" {
			return fmt.Errorf("%s:// URLs need the %s store, which is not linked into this binary (it links %s); %s",
				form, store, strings.Join(Names(), ", "), how)
		}
	}
	return fmt.Errorf("no store this bundle links reads %s:// URLs (%s); a store's URLs need its package imported in the bundle's main package",
		form, SupportedURLs())
}

// openStore opens the bucket (or filesystem) that loc lives in.
func openStore(ctx context.Context, loc Location, opt Options) (Driver, error) {
	d, ok := Lookup(loc.Scheme)
	if !ok {
		return nil, final.Mark(unlinked(loc.Scheme))
	}
	return d.Open(ctx, loc, opt)
}
