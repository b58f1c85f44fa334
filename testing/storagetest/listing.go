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
// an object (storage.List leaves out what the store's own List may not);
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

	// Stopping: the second false ends it, however many objects remain.
	calls := 0
	if err := l.List(ctx, base+"in", func(storage.Object) bool { calls++; return calls < 2 }); err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Fatalf("each was called %d times; it returned false on its 2nd call, which must end the listing of 4 objects", calls)
	}

	// An upload whose bytes are all sent but not committed is no object.
	e := storage.NewExport(a.Options)
	defer func() { _ = e.Abort(ctx) }()
	pending := RandomBytes(storage.PartSize+10, 9) // a multipart upload, not one request
	if _, err := e.Stage(ctx, a.URL("in/pending.bin"), bytes.NewReader(pending), int64(len(pending))); err != nil {
		t.Fatal(err)
	}
	if got := listAll(t, l, base, "in/")["in/pending.bin"]; got != 0 {
		t.Errorf("the store lists an uncommitted upload as in/pending.bin (%d bytes)", got)
	}
	listed, err := storage.List(ctx, a.URL("in")+"/", "", 100, a.Options)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, o := range listed {
		loc, err := storage.ParseURL(o.URL)
		if err != nil {
			t.Fatalf("storage.List gave %s, which does not parse: %v", o.URL, err)
		}
		got[strings.TrimPrefix(loc.Key, base)] = o.Size
	}
	if want := under("in/"); !maps.Equal(got, want) {
		t.Errorf("storage.List during an export found %v, want %v", got, want)
	}
	if err := e.Abort(ctx); err != nil {
		t.Fatal(err)
	}

	// A key ending in "/", as cloud consoles make for a folder, where the
	// store holds one apart from the key without it (a filesystem does
	// not: storage.Put refuses such keys, a driver's Put may write in/folder).
	placeholder := base + "in/folder/"
	err = d.Put(ctx, placeholder, strings.NewReader(""))
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
	} else if got := listAll(t, l, base, "in/"); !maps.Equal(got, under("in/")) {
		t.Errorf("with a placeholder %s, List found %v, want %v", placeholder, got, under("in/"))
	}

	if a.MissingBucket == "" {
		return // file:// has no buckets
	}
	_, missing, _ := lister(t, a, a.MissingBucket, "")
	called := false
	err = missing.List(ctx, "", func(storage.Object) bool { called = true; return true })
	if !errors.Is(err, storage.ErrNoBucket) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("List of a missing bucket: want storage.ErrNoBucket saying it does not exist, got %v", err)
	}
	if called {
		t.Error("List of a missing bucket found objects")
	}
	if _, err := storage.List(ctx, a.MissingBucket, "", 10, a.Options); !errors.Is(err, storage.ErrNoBucket) {
		t.Errorf("storage.List of a missing bucket: want storage.ErrNoBucket, got %v", err)
	}
}

// lister opens the driver of the bucket raw (a URL naming key) lives in,
// with the area's credentials, as the storage.Lister it must be, and
// returns the prefix the area's keys have in it ("" for a bucket, the
// directory for file://).
func lister(t *testing.T, a Area, raw, key string) (storage.Driver, storage.Lister, string) {
	t.Helper()
	loc, err := storage.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	reg, ok := storage.Lookup(loc.Scheme)
	if !ok {
		t.Fatalf("no store %s is registered", loc.Scheme)
	}
	d, err := reg.Open(ctx, loc, a.Options)
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
