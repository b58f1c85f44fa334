package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
)

// Handle is how a task reaches object storage: every transfer, check and
// listing of the task goes through one, which opens each bucket (a
// container; file://'s filesystem) once per connection, the first time a
// Location there is used, and keeps it open for the rest until Close, as
// gocloud's blob.OpenBucket is opened once and then used by key. Opening
// a bucket is what costs: a cloud store's credential chain and client
// (config.LoadDefaultConfig for s3://).
//
// Locations come from Registry.Parse or ParsePrefix, which check a URL once,
// where it enters; a Handle takes no URLs. Credentials come from Connect.
// A Handle is safe for concurrent use; Close it once its transfers end.
type Handle struct {
	reg *Registry
	opt Options

	mu      sync.Mutex
	creds   map[connKey]Credentials
	buckets map[bucketKey]*bucket
	closed  bool
}

// connKey names one connection of one store; bucketKey one bucket opened
// with it.
type (
	connKey   struct{ scheme, connID string }
	bucketKey struct{ scheme, bucket, connID string }
)

// bucket is an opened bucket and whether its Check passed.
type bucket struct {
	d       Driver
	checked bool
}

// NewHandle returns a handle on the stores of r; opt's logger and progress
// interval apply to its transfers.
func (r *Registry) NewHandle(opt Options) *Handle {
	return &Handle{reg: r, opt: opt, creds: map[connKey]Credentials{}, buckets: map[bucketKey]*bucket{}}
}

// Registry is the registry h opens stores from, whose Parse and
// ParsePrefix make the Locations h takes.
func (h *Handle) Registry() *Registry { return h.reg }

// Connect gives h the credentials of connection connID for store scheme,
// as Registry.FromConnection parsed them (register their Secrets with the
// masker first): a Location of the store whose ConnID is connID is reached
// with them. connID "" sets what Locations naming no connection use, which
// are otherwise the store's default credentials. Connect before the first
// Location of that connection is used: a bucket keeps the credentials it
// was opened with.
func (h *Handle) Connect(scheme, connID string, creds Credentials) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.creds[connKey{scheme, connID}] = creds
}

// Credentials are what Connect gave for (scheme, connID), if it was called.
func (h *Handle) Credentials(scheme, connID string) (Credentials, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.creds[connKey{scheme, connID}]
	return c, ok
}

// open returns the bucket loc lives in, opening it the first time. A
// failure to open says what was being done (doing: "reading ", or "" for
// a check).
func (h *Handle) open(ctx context.Context, loc Location, doing string) (*bucket, error) {
	if loc.kind == unchecked {
		return nil, final.Errorf("%s%s: the location was not made by Registry.Parse or ParsePrefix, which check a URL's key; parse the URL with the handle's Registry", doing, loc)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, fmt.Errorf("%s%s: the storage handle is closed", doing, loc)
	}
	key := bucketKey{loc.Scheme, loc.Bucket, loc.ConnID}
	if b := h.buckets[key]; b != nil {
		return b, nil
	}
	creds := h.creds[connKey{loc.Scheme, loc.ConnID}]
	if loc.ConnID != "" && creds == nil {
		// Falling back to the default credentials would act with the
		// wrong identity.
		return nil, final.Errorf("%s names connection %q, which was not resolved; read it (%s connection), parse it with Registry.FromConnection and give it to Handle.Connect", loc, loc.ConnID, article(h.reg.ConnType(loc.Scheme)))
	}
	reg, ok := h.reg.Lookup(loc.Scheme)
	if !ok {
		return nil, fmt.Errorf("%s%s: %w", doing, loc, final.Mark(h.reg.unlinkedErr(loc.Scheme)))
	}
	d, err := reg.Open(ctx, loc.Bucket, creds)
	if err != nil {
		return nil, fmt.Errorf("%s%s: %w", doing, loc, err)
	}
	b := &bucket{d: d}
	h.buckets[key] = b
	return b, nil
}

// Close closes every bucket h opened; h opens none after.
func (h *Handle) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	var errs []error
	for k, b := range h.buckets {
		errs = append(errs, b.d.Close())
		delete(h.buckets, k)
	}
	return errors.Join(errs...)
}

// Open streams the object at loc. The caller must Close the reader. A
// missing object is an error wrapping ErrNotFound.
func (h *Handle) Open(ctx context.Context, loc Location) (io.ReadCloser, error) {
	b, err := h.open(ctx, loc, "reading ")
	if err != nil {
		return nil, err
	}
	r, err := b.d.Open(ctx, loc.Key)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("reading %s: %w; check the bucket, key or path", loc, ErrNotFound)
		}
		return nil, fmt.Errorf("reading %s: %w", loc, err)
	}
	return &readCloser{r: r, p: startProgress(h.opt, "download", loc.String())}, nil
}

type readCloser struct {
	r io.ReadCloser
	p *Progress
}

func (rc *readCloser) Read(b []byte) (int, error) {
	n, err := rc.r.Read(b)
	rc.p.Add(n)
	return n, err
}

func (rc *readCloser) Close() error {
	rc.p.Finish()
	return rc.r.Close()
}

// Put streams r to loc, replacing any object there. On error nothing new
// is at loc (an older object stays as it was).
func (h *Handle) Put(ctx context.Context, loc Location, r io.Reader) (Written, error) {
	b, err := h.open(ctx, loc, "writing ")
	if err != nil {
		return Written{}, err
	}
	w, err := hashed(h.opt, loc, r, func(hr io.Reader) error { return b.d.Put(ctx, loc.Key, hr) })
	if err != nil {
		return Written{}, fmt.Errorf("writing %s: %w", loc, err)
	}
	return w, nil
}

// Check fails, before any byte moves, when loc cannot be used: its bucket
// or container does not exist, the credentials cannot reach it, or
// (forRead) the object is missing. Tasks call it before they provision a
// sandbox. It creates nothing. A bucket is checked once per handle.
func (h *Handle) Check(ctx context.Context, loc Location, forRead bool) error {
	b, err := h.open(ctx, loc, "")
	if err != nil {
		return err
	}
	if err := h.checkBucket(ctx, b, loc.Key); err != nil {
		return fmt.Errorf("%s: %w", loc, err)
	}
	if !forRead {
		return nil
	}
	ok, err := b.d.Exists(ctx, loc.Key)
	if err != nil {
		return fmt.Errorf("checking %s: %w", loc, err)
	}
	if !ok {
		return fmt.Errorf("reading %s: %w; check the bucket, key or path", loc, ErrNotFound)
	}
	return nil
}

// keyChecker is a driver that can refuse a key without touching it: the
// file store, whose paths must lie under the worker's file roots, which
// a check for writing must refuse before a sandbox runs.
type keyChecker interface{ checkKey(key string) error }

// checkBucket runs b's Check once, and a key checker's check every time.
func (h *Handle) checkBucket(ctx context.Context, b *bucket, key string) error {
	if kc, ok := b.d.(keyChecker); ok {
		if err := kc.checkKey(key); err != nil {
			return err
		}
	}
	h.mu.Lock()
	checked := b.checked
	h.mu.Unlock()
	if checked {
		return nil
	}
	if err := b.d.Check(ctx); err != nil {
		return err
	}
	h.mu.Lock()
	b.checked = true
	h.mu.Unlock()
	return nil
}
