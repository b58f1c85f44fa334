package storagetest

import (
	"bytes"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// listing: the store's driver implements storage.Lister as its doc says.
// A prefix is a key prefix, not a directory (in/ holds in/sub/..., in does
// in-sibling.csv too); keys come back verbatim with their sizes and times;
// each returning false ends the listing; an upload not yet committed is not
// an object (Handle.List leaves out what the store's own List may not);
// directory placeholders are not objects; a missing bucket is
// storage.ErrNoBucket.
func listing(t *testing.T, a Area) {
	d, l, base := lister(t, a, a.URL("probe"), "probe")
	written := map[string]int64{
		"in/a.csv":     3,
		"in/empty.bin": 0,
		"in/sub/manual__2026-12-01T00:00:00+00:00 report.csv": 1000,
		"in-sibling.csv": 5,
		"out/d.csv":      7,
	}
	for key, n := range written {
		mustPut(t, a, key, string(RandomBytes(int(n), uint64(n))))
	}
	under := func(prefix string) map[string]int64 {
		want := maps.Clone(written)
		maps.DeleteFunc(want, func(k string, _ int64) bool { return !strings.HasPrefix(k, prefix) })
		return want
	}
	for _, prefix := range []string{"in/", "in/s", "in", "out/d.csv", "none/", ""} {
		got := listAll(t, l, base, prefix)
		if want := under(prefix); !maps.Equal(got, want) {
			t.Errorf("List(%q) found %v, want %v", base+prefix, got, want)
		}
	}
	listingStops(t, l, base)
	listingLeavesOutPending(t, a, l, base, under("in/"))
	listingLeavesOutPlaceholders(t, d, l, base, under("in/"))
	listingMissingBucket(t, a)
}

// listingStops: the second false ends the listing of in (4 objects).
func listingStops(t *testing.T, l storage.Lister, base string) {
	calls := 0
	if err := l.List(ctx, base+"in", func(storage.Object) bool { calls++; return calls < 2 }); err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Fatalf("each was called %d times; it returned false on its 2nd call, which must end the listing of 4 objects", calls)
	}
}

// listingLeavesOutPending: an upload whose bytes are all sent but not
// committed is no object, to the store's List or to Handle.List, which
// must find exactly want under in/.
func listingLeavesOutPending(t *testing.T, a Area, l storage.Lister, base string, want map[string]int64) {
	h := a.Handle(t, storage.Options{})
	e := h.NewExport()
	defer func() { _ = e.Abort(ctx) }()
	pending := RandomBytes(storage.PartSize+10, 9) // a multipart upload, not one request
	if _, err := e.Stage(ctx, a.Loc(t, "in/pending.bin"), bytes.NewReader(pending), int64(len(pending))); err != nil {
		t.Fatal(err)
	}
	if got := listAll(t, l, base, "in/")["in/pending.bin"]; got != 0 {
		t.Errorf("the store lists an uncommitted upload as in/pending.bin (%d bytes)", got)
	}
	prefix, err := storage.Default.ParsePrefix(a.URL("in") + "/")
	if err != nil {
		t.Fatal(err)
	}
	listed, err := h.List(ctx, prefix, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, o := range listed {
		loc, err := storage.Default.Parse(o.URL)
		if err != nil {
			t.Fatalf("Handle.List gave %s, which does not parse: %v", o.URL, err)
		}
		got[strings.TrimPrefix(loc.Key, base)] = o.Size
	}
	if !maps.Equal(got, want) {
		t.Errorf("Handle.List during an export found %v, want %v", got, want)
	}
	if err := e.Abort(ctx); err != nil {
		t.Fatal(err)
	}
}

// listingLeavesOutPlaceholders: a key ending in "/", as cloud consoles
// make for a folder, where the store holds one apart from the key without
// it, is no object: List under in/ still finds exactly want. A filesystem
// holds none (Registry.Parse refuses such keys; a driver's Put may write
// in/folder), and then there is nothing to leave out.
func listingLeavesOutPlaceholders(t *testing.T, d storage.Driver, l storage.Lister, base string, want map[string]int64) {
	placeholder := base + "in/folder/"
	err := d.Put(ctx, placeholder, strings.NewReader(""))
	if err == nil {
		var ok, plain bool
		if ok, err = d.Exists(ctx, placeholder); err == nil {
			plain, err = d.Exists(ctx, strings.TrimSuffix(placeholder, "/"))
		}
		switch {
		case err != nil:
			t.Fatal(err)
		case !ok:
			// fake-gcs-server's filesystem backend accepts such a key and
			// keeps nothing.
			err = errors.New("Put succeeded but nothing exists at the key")
		case plain:
			err = errors.New("it was stored without its trailing /")
			_ = d.Remove(ctx, strings.TrimSuffix(placeholder, "/"))
		}
	}
	if err != nil {
		t.Logf("the store holds no key ending in /, so it has no placeholders to leave out (%v)", err)
	} else if got := listAll(t, l, base, "in/"); !maps.Equal(got, want) {
		t.Errorf("with a placeholder %s, List found %v, want %v", placeholder, got, want)
	}
}

// listingMissingBucket: listing a bucket that does not exist is
// storage.ErrNoBucket, from the store and from Handle.List.
func listingMissingBucket(t *testing.T, a Area) {
	if a.MissingBucket == "" {
		return // file:// has no buckets
	}
	_, missing, _ := lister(t, a, a.MissingBucket, "")
	called := false
	err := missing.List(ctx, "", func(storage.Object) bool { called = true; return true })
	if !errors.Is(err, storage.ErrNoBucket) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("List of a missing bucket: want storage.ErrNoBucket saying it does not exist, got %v", err)
	}
	if called {
		t.Error("List of a missing bucket found objects")
	}
	prefix, err := storage.Default.ParsePrefix(a.MissingBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Handle(t, storage.Options{}).List(ctx, prefix, "", 10); !errors.Is(err, storage.ErrNoBucket) {
		t.Errorf("Handle.List of a missing bucket: want storage.ErrNoBucket, got %v", err)
	}
}

// lister opens the driver of the bucket raw (a URL naming key) lives in,
// with the area's credentials, as the storage.Lister it must be, and
// returns the prefix the area's keys have in it ("" for a bucket, the
// directory for file://).
func lister(t *testing.T, a Area, raw, key string) (storage.Driver, storage.Lister, string) {
	t.Helper()
	loc := Parse(t, raw)
	reg, ok := storage.Default.Lookup(loc.Scheme)
	if !ok {
		t.Fatalf("no store %s is registered", loc.Scheme)
	}
	creds, _ := a.Handle(t, storage.Options{}).Credentials(loc.Scheme, "")
	d, err := reg.Open(ctx, loc.Bucket, creds)
	if err != nil {
		t.Fatalf("opening the bucket of %s: %v", raw, err)
	}
	t.Cleanup(func() { d.Close() })
	l, ok := d.(storage.Lister)
	if !ok {
		t.Fatalf("the driver of %s (%T) does not implement storage.Lister; every store lists its objects, for the list task", raw, d)
	}
	return d, l, strings.TrimSuffix(loc.Key, key)
}

// listAll lists base+prefix, keys relative to base, checking each object
// is one (no key ending in "/", a time near now) and comes once.
func listAll(t *testing.T, l storage.Lister, base, prefix string) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	now := time.Now()
	err := l.List(ctx, base+prefix, func(o storage.Object) bool {
		key, ok := strings.CutPrefix(o.Key, base)
		if !ok || !strings.HasPrefix(key, prefix) {
			t.Errorf("List(%q) found %q, which is not under it", base+prefix, o.Key)
		}
		if _, dup := got[key]; dup {
			t.Errorf("List(%q) found %q twice", base+prefix, o.Key)
		}
		if d := now.Sub(o.Modified); o.Modified.IsZero() || d > time.Hour || d < -time.Hour {
			t.Errorf("List(%q): %q was modified at %v, not within an hour of now (%v)", base+prefix, o.Key, o.Modified, now)
		}
		got[key] = o.Size
		return true
	})
	if err != nil {
		t.Fatalf("List(%q): %v", base+prefix, err)
	}
	return got
}
