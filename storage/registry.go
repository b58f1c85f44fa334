package storage

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
)

// Registry holds stores by scheme, with the URL schemes that name each and
// those refused, as sandbox/registry's Registry holds sandbox backends:
// tasks take the one they use (tasks.Deps.Storage's), and tests build
// their own. Default is where store packages register themselves. The
// zero value is not usable; use NewRegistry.
type Registry struct {
	mu      sync.RWMutex
	stores  map[string]Registration
	forms   map[string]string // URL scheme -> store
	refused map[string]string // URL scheme -> what to write instead
	// unlinked names the store a URL scheme this binary does not link
	// belongs to and how to get a binary that links it (SetUnlinkedHint).
	unlinked func(form string) (store, how string)
}

// NewRegistry returns a registry holding file://, the store package
// storage has built in, and nothing else.
func NewRegistry() *Registry {
	r := &Registry{stores: map[string]Registration{}, forms: map[string]string{}, refused: map[string]string{}}
	r.Register(fileRegistration)
	return r
}

// Default is where store packages register themselves from init
// (Register): the stores the binary links.
var Default = NewRegistry()

// Register adds d to Default; see Registry.Register.
func Register(d Registration) { Default.Register(d) }

// Register makes a store usable. It panics on a driver without a scheme,
// Open or FromConnection, or a scheme or URL form registered twice:
// programming errors that must fail at start-up.
func (r *Registry) Register(d Registration) {
	if d.Scheme == "" || d.Open == nil || (d.FromConnection == nil) != (len(d.ConnTypes) == 0) {
		panic(fmt.Sprintf("storage: driver %q needs a scheme, Open, and connection types with FromConnection", d.Scheme))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.stores[d.Scheme]; dup {
		panic(fmt.Sprintf("storage: driver %q registered twice", d.Scheme))
	}
	for _, f := range append(d.forms(), slices.Collect(maps.Keys(d.Refuse))...) {
		f = strings.ToLower(f)
		if other, dup := r.forms[f]; dup {
			panic(fmt.Sprintf("storage: URL scheme %s:// of driver %q is driver %q's already", f, d.Scheme, other))
		}
		if _, dup := r.refused[f]; dup {
			panic(fmt.Sprintf("storage: URL scheme %s:// of driver %q is refused by another driver", f, d.Scheme))
		}
	}
	r.stores[d.Scheme] = d
	for _, f := range d.forms() {
		r.forms[strings.ToLower(f)] = d.Scheme
	}
	for f, why := range d.Refuse {
		r.refused[strings.ToLower(f)] = why
	}
}

// Lookup is the registration of store scheme ("gs").
func (r *Registry) Lookup(scheme string) (Registration, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	d, ok := r.stores[scheme]
	return d, ok
}

// Names lists the stores registered, sorted ("az", "file", "gs", "s3").
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.stores))
}

// SetUnlinkedHint sets what a URL of a store this binary does not link is
// told: hint gets the URL scheme ("gcs", "abfs") and returns the store's
// name and the build command that adds it (the standard binary chooses its
// stores with build tags), or "" for a scheme it does not know.
func (r *Registry) SetUnlinkedHint(hint func(form string) (store, how string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unlinked = hint
}

// driverFor is the driver of URL scheme form, or why there is none.
func (r *Registry) driverFor(form string) (Registration, error) {
	r.mu.RLock()
	d, ok := r.stores[r.forms[form]]
	why, isRefused := r.refused[form]
	r.mu.RUnlock()
	switch {
	case ok:
		return d, nil
	case isRefused:
		return Registration{}, errors.New(why)
	}
	return Registration{}, r.unlinkedErr(form)
}

// unlinkedErr is the error for URL scheme form, which no store here reads.
func (r *Registry) unlinkedErr(form string) error {
	r.mu.RLock()
	hint := r.unlinked
	r.mu.RUnlock()
	if hint != nil {
		if store, how := hint(form); how != "" {
			return fmt.Errorf("%s:// URLs need the %s store, which is not linked into this binary (it links %s); %s",
				form, store, strings.Join(r.Names(), ", "), how)
		}
	}
	return fmt.Errorf("no store this bundle links reads %s:// URLs (%s); a store's URLs need its package imported in the bundle's main package",
		form, r.SupportedURLs())
}

// RequireLinked fails when raw is a URL whose scheme no store here reads,
// saying what to do; it is nil for a URL a store here reads, valid or not
// (Parse explains what is wrong with those), and for text that is no URL.
// Bundle configs are checked with it when they load, so such a config is
// refused when packed.
func (r *Registry) RequireLinked(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return nil
	}
	if _, err := r.driverFor(strings.ToLower(u.Scheme)); err != nil {
		return final.Mark(err)
	}
	return nil
}

// SupportedURLs lists the URL forms of the stores here, for error
// messages: "supported here: file:///absolute/path, s3://bucket/key (also
// s3a://); a connection may be named before the bucket, as in
// s3://conn_id@bucket/key".
func (r *Registry) SupportedURLs() string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var each []string
	withConn := ""
	for _, scheme := range slices.Sorted(maps.Keys(r.stores)) {
		d := r.stores[scheme]
		fs := d.forms()
		ex := d.example()
		if len(fs) > 1 {
			ex += " (also " + strings.Join(fs[1:], "://, ") + "://)"
		}
		each = append(each, ex)
		if withConn == "" && d.FromConnection != nil {
			withConn = fs[0] + "://conn_id@bucket/key"
		}
	}
	msg := "supported here: " + strings.Join(each, ", ")
	if withConn != "" {
		msg += "; a connection may be named before the bucket, as in " + withConn
	}
	return msg
}

// ConnType is the Airflow connection type to create for a store ("" for
// file:// and stores that take none).
func (r *Registry) ConnType(scheme string) string {
	if d, ok := r.Lookup(scheme); ok && len(d.ConnTypes) > 0 {
		return d.ConnTypes[0]
	}
	return ""
}

// FromConnection parses Airflow connection c for the store scheme ("s3",
// "gs", "az": a Location's Scheme) with the store's own adapter, after
// checking that its type is one the store accepts; Handle.Connect takes
// what it returns. Its errors are final: the connection has to be fixed.
func (r *Registry) FromConnection(scheme string, c connections.Connection) (Credentials, error) {
	d, ok := r.Lookup(scheme)
	if !ok {
		return nil, final.Errorf("no store %q is linked into this binary (it links %s)", scheme, strings.Join(r.Names(), ", "))
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

// Parse checks an object's URL (s3://bucket/key, file:///path) and
// explains what is wrong with it: the one check a URL needs, where it
// enters (a task's input), before a Handle uses the Location. Its errors
// are final, as the URL will not change.
func (r *Registry) Parse(raw string) (Location, error) {
	loc, err := r.parse(raw, objectKey)
	return loc, final.Mark(err)
}

// ParsePrefix checks a listing's prefix URL (s3://bucket/incoming/, whose
// key may be empty or end with "/") and explains what is wrong with it.
func (r *Registry) ParsePrefix(raw string) (Location, error) {
	loc, err := r.parse(raw, prefixKey)
	return loc, final.Mark(err)
}

// parse is Parse's work: the URL's scheme chooses the driver, which reads
// the rest; the key is then held to what every store keeps verbatim.
func (r *Registry) parse(raw string, kind keyKind) (Location, error) {
	shown := redactURL(raw)
	u, err := url.Parse(raw)
	if err != nil {
		return Location{}, fmt.Errorf("%q is not a valid URL (%v); %s", shown, err, r.SupportedURLs())
	}
	form := strings.ToLower(u.Scheme)
	if form == "" {
		return Location{}, fmt.Errorf("%q is not a storage URL; %s", shown, r.SupportedURLs())
	}
	d, err := r.driverFor(form) // its errors name the scheme
	if err != nil {
		return Location{}, err
	}
	loc, err := d.parse(u)
	if err != nil {
		return Location{}, fmt.Errorf("%q %v", shown, err)
	}
	loc.Scheme, loc.form, loc.kind = d.Scheme, form, kind
	if err := kind.check(loc.Key); err != nil {
		return Location{}, fmt.Errorf("%q: %v", shown, err)
	}
	return loc, nil
}
