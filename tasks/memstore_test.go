package tasks

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// memStorage stands in for s3://, gs:// and abfs:// in the tasks' tests:
// their real registrations (linked by drivers_test.go) read the URLs and
// parse the connections, its buckets hold the bytes, keyed by URL
// (s3://bucket/key), with failure injection. Everything reaches it through
// a storage handle on reg, as it reaches a real store.
type memStorage struct {
	reg *storage.Registry

	mu        sync.Mutex
	objects   map[string][]byte
	staged    map[string][]byte
	failStage map[string]error // by destination URL: the upload fails midway
	noBucket  map[string]bool  // by bucket URL (s3://nobucket): it does not exist
	failOpen  map[string]error // by URL: Open fails, though Check passed
	aborts    int              // uploads discarded
	parses    int              // URLs its stores' parsers read
	opens     int              // buckets opened
	// beforeStage, when set, runs as an upload starts, before it reads.
	beforeStage func(dest string)
	// midRead, when set, holds each object read by Open after its first
	// byte until it is closed: a transfer that is visibly under way.
	midRead <-chan struct{}
}

func newMemStorage() *memStorage {
	m := &memStorage{objects: map[string][]byte{}, staged: map[string][]byte{}, failStage: map[string]error{},
		noBucket: map[string]bool{}, failOpen: map[string]error{}, reg: storage.NewRegistry()}
	for _, scheme := range []string{"s3", "gs", "az"} {
		r, ok := storage.Default.Lookup(scheme)
		if !ok {
			panic("the tasks' tests link storage/" + scheme + " (drivers_test.go)")
		}
		form := r.Forms[0]
		r.ParseURL = m.counting(r)
		r.Open = func(_ context.Context, bucket string, _ storage.Credentials) (storage.Driver, error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.opens++
			return &memBucket{m: m, at: form + "://" + bucket, name: bucket}, nil
		}
		m.reg.Register(r)
	}
	return m
}

// counting is r's URL parser, counting its calls in m.parses.
func (m *memStorage) counting(r storage.Registration) func(*url.URL) (storage.Location, error) {
	parse, connType := r.ParseURL, r.ConnTypes[0]
	if parse == nil {
		parse = func(u *url.URL) (storage.Location, error) { return storage.ParseBucketURL(u, connType, "bucket") }
	}
	return func(u *url.URL) (storage.Location, error) {
		m.mu.Lock()
		m.parses++
		m.mu.Unlock()
		return parse(u)
	}
}

// counts are how many URLs m's parsers read and buckets it opened.
func (m *memStorage) counts() (parses, opens int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.parses, m.opens
}

// memBucket is one bucket of a memStorage.
type memBucket struct {
	m        *memStorage
	at, name string // at: the bucket's URL (s3://bucket)
}

func (b *memBucket) url(key string) string { return b.at + "/" + key }

func (b *memBucket) Put(ctx context.Context, key string, r io.Reader) error {
	p, err := b.Upload(ctx, key, r, -1)
	if err != nil {
		return err
	}
	return p.Commit(ctx)
}

func (b *memBucket) Upload(_ context.Context, key string, r io.Reader, _ int64) (storage.Pending, error) {
	dest := b.url(key)
	if b.m.beforeStage != nil {
		b.m.beforeStage(dest)
	}
	data, err := io.ReadAll(r)
	b.m.mu.Lock()
	defer b.m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if ferr := b.m.failStage[dest]; ferr != nil {
		// Half of it was sent; a failed upload leaves nothing pending
		// (storage.Driver), so the store discards it itself.
		return nil, ferr
	}
	b.m.staged[dest+".partial"] = data
	return &memPending{m: b.m, dest: dest}, nil
}

type memPending struct {
	m    *memStorage
	dest string
}

func (p *memPending) Commit(context.Context) error {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	p.m.objects[p.dest] = p.m.staged[p.dest+".partial"]
	delete(p.m.staged, p.dest+".partial")
	return nil
}

func (p *memPending) Abort(context.Context) error {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	p.m.aborts++
	delete(p.m.staged, p.dest+".partial")
	return nil
}

func (b *memBucket) Open(_ context.Context, key string) (io.ReadCloser, error) {
	b.m.mu.Lock()
	defer b.m.mu.Unlock()
	if err := b.m.failOpen[b.url(key)]; err != nil {
		return nil, err
	}
	data, ok := b.m.objects[b.url(key)]
	if !ok {
		return nil, storage.ErrNotFound
	}
	if b.m.midRead != nil {
		return io.NopCloser(io.MultiReader(bytes.NewReader(data[:1]), &heldReader{b.m.midRead, bytes.NewReader(data[1:])})), nil
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// heldReader reads nothing until held is closed.
type heldReader struct {
	held <-chan struct{}
	r    io.Reader
}

func (h *heldReader) Read(p []byte) (int, error) {
	<-h.held // a test that never releases it hangs until go test's -timeout
	return h.r.Read(p)
}

func (b *memBucket) Exists(_ context.Context, key string) (bool, error) {
	b.m.mu.Lock()
	defer b.m.mu.Unlock()
	_, ok := b.m.objects[b.url(key)]
	return ok, nil
}

func (b *memBucket) Remove(_ context.Context, key string) error {
	b.m.mu.Lock()
	defer b.m.mu.Unlock()
	delete(b.m.objects, b.url(key))
	return nil
}

// Check refuses a bucket noBucket names, as a store refuses a missing one.
func (b *memBucket) Check(context.Context) error {
	b.m.mu.Lock()
	defer b.m.mu.Unlock()
	if b.m.noBucket[b.at] {
		return storage.NoBucket(fmt.Errorf("bucket %q does not exist; create it (the worker never creates buckets) or fix the URL", b.name))
	}
	return nil
}

func (b *memBucket) List(_ context.Context, prefix string, each func(storage.Object) bool) error {
	b.m.mu.Lock()
	found := map[string]int{}
	for u, data := range b.m.objects {
		if key, ok := strings.CutPrefix(u, b.at+"/"); ok && strings.HasPrefix(key, prefix) {
			found[key] = len(data)
		}
	}
	b.m.mu.Unlock()
	for _, key := range slices.Sorted(maps.Keys(found)) {
		if !each(storage.Object{Key: key, Size: int64(found[key]), Modified: time.Now()}) {
			break
		}
	}
	return nil
}

func (b *memBucket) Close() error { return nil }
