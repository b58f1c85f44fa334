package storage

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
)

// Bucket is one bucket, container or the local filesystem behind a driver.
// Each method is all-or-nothing at the key it names: a failed write leaves
// nothing there, and an older object stays as it was.
//
// Drivers for s3://, gs:// and Azure live in their own packages
// (storage/s3, storage/gcs, storage/azure) and register themselves, so a
// bundle links only the cloud SDKs it imports.
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

// Credentials are one store's resolved connection, as its driver parsed it
// (*s3.AWSConfig, *gcs.Config, *azure.Config): opaque to package storage and
// its callers, which only pass them back in Options.Credentials.
type Credentials interface {
	// Secrets are the values a secret masker must hide, keyed by what
	// each is ("private key"); empty values are ignored.
	Secrets() map[string]string
}

// Driver is what a store package registers: its URL scheme, the Airflow
// connection types that reach it and the adapter reading them, and how to
// open a bucket. A new store is its own package plus one Register call.
type Driver struct {
	// Scheme is the store's name in Location.Scheme and
	// Options.Credentials ("gs").
	Scheme string
	// Forms are the URL schemes that name the store, the canonical one
	// first ("gs", "gcs"); empty means Scheme alone.
	Forms []string
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
	drivers   = map[string]Driver{"file": {Scheme: "file", Open: openFileStore}}
	forms     = map[string]string{} // URL scheme -> store, for registered stores
)

// wellKnown are the optional stores this package names when a bundle
// does not link them (location.go knows their URL spellings), so the error
// can say which package, or build option (name), adds them; sweeps says
// whether the driver sets Driver.Sweep.
var wellKnown = map[string]struct {
	form, name, pkg, connType string
	sweeps                    bool
}{
	"s3": {"s3", "s3", "github.com/airflow-sandbox/airflow-go-worker/storage/s3", "aws", true},
	"gs": {"gs", "gcs", "github.com/airflow-sandbox/airflow-go-worker/storage/gcs", "google_cloud_platform", false},
	"az": {"abfs", "azure", "github.com/airflow-sandbox/airflow-go-worker/storage/azure", "wasb", false},
}

// Register makes a store usable; driver packages call it from init. It
// panics on a driver without a scheme, Open or FromConnection, or a
// scheme registered twice: programming errors that must fail at start-up.
func Register(d Driver) {
	if d.Scheme == "" || d.Open == nil || (d.FromConnection == nil) != (len(d.ConnTypes) == 0) {
		panic(fmt.Sprintf("storage: driver %q needs a scheme, Open, and connection types with FromConnection", d.Scheme))
	}
	driversMu.Lock()
	defer driversMu.Unlock()
	if _, dup := drivers[d.Scheme]; dup {
		panic(fmt.Sprintf("storage: driver %q registered twice", d.Scheme))
	}
	drivers[d.Scheme] = d
	forms[d.Scheme] = d.Scheme
	for _, f := range d.Forms {
		forms[strings.ToLower(f)] = d.Scheme
	}
}

func lookupDriver(scheme string) (Driver, bool) {
	driversMu.RLock()
	defer driversMu.RUnlock()
	d, ok := drivers[scheme]
	return d, ok
}

// registeredForm is the store a registered driver's URL scheme names.
func registeredForm(form string) string {
	driversMu.RLock()
	defer driversMu.RUnlock()
	return forms[form]
}

// ConnType is the Airflow connection type to create for a store ("" for
// file:// and stores that take none).
func ConnType(scheme string) string {
	if d, ok := lookupDriver(scheme); ok {
		if len(d.ConnTypes) == 0 {
			return ""
		}
		return d.ConnTypes[0]
	}
	return wellKnown[scheme].connType
}

// FromConnection parses Airflow connection c for the store scheme ("s3",
// "gs", "az": a Location's Scheme) with the store's own adapter, after
// checking that its type is one the store accepts. Its errors are final:
// the connection has to be fixed.
func FromConnection(scheme string, c connections.Connection) (Credentials, error) {
	d, ok := lookupDriver(scheme)
	if !ok {
		form := wellKnown[scheme].form
		if form == "" {
			form = scheme
		}
		return nil, unlinked(Location{Scheme: scheme, form: form})
	}
	if d.FromConnection == nil {
		return nil, final.Errorf("%s:// URLs take no connection; remove the connection %q from the task", scheme, c.ConnID)
	}
	if t := strings.ToLower(c.ConnType); t != "" && !slices.Contains(d.ConnTypes, t) {
		return nil, final.Errorf("connection %q has type %q, not %s; %s URLs need a %s connection", c.ConnID, c.ConnType, d.ConnTypes[0], d.describe(), d.ConnTypes[0])
	}
	cfg, err := d.FromConnection(c)
	return cfg, final.Mark(err)
}

// describe names the store's URL forms ("gs:// and gcs://").
func (d Driver) describe() string {
	fs := d.Forms
	if len(fs) == 0 {
		fs = []string{d.Scheme}
	}
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f + "://"
	}
	return strings.Join(out, ", ")
}

// Adapt turns a connection adapter that returns the driver's config T into
// Driver.FromConnection, which hands out *T (what CredentialsFor reads).
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
			return final.Errorf("%s:// URLs need the %s store, which is not linked into this binary (it links %s); %s",
				loc.form, wellKnown[loc.Scheme].name, strings.Join(Schemes(), ", "), how)
		}
	}
	pkg := wellKnown[loc.Scheme].pkg
	return final.Errorf("%s:// URLs need the driver package %s, which this bundle does not link; import it (import _ %q) in the bundle's main package",
		loc.form, pkg, pkg)
}

// openStore opens the bucket (or filesystem) that loc lives in.
func openStore(ctx context.Context, loc Location, opt Options) (Bucket, error) {
	d, ok := lookupDriver(loc.Scheme)
	if !ok {
		return nil, unlinked(loc)
	}
	return d.Open(ctx, loc, opt)
}
