// Package storagetest is the conformance suite every store of package
// storage passes: S3 (versitygw), GCS (fake-gcs-server), Azure Blob
// (Azurite) and file://, each on a real server the test starts. The same
// assertions run on each: round trips of awkward sizes, streaming in
// bounded memory, all-or-nothing multi-file exports, an older object left
// intact by any failure, and a file that changes while it streams.
package storagetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
	"github.com/airflow-sandbox/airflow-go-worker/testing/memwatch"
)

// Target is one store the suite runs against. Each call of the suite's
// subtests asks New for a fresh, empty area (a new bucket or directory).
type Target struct {
	Name string
	New  func(t testing.TB) Area
}

// Area is an empty place in a store.
type Area struct {
	// Connect gives a handle the connection the area is reached with,
	// for its URLs, which name none (Connection makes it); nil: the
	// store's default credentials, or a store that takes none.
	Connect func(h *storage.Handle)
	// URL names key inside the area.
	URL func(key string) string
	// Objects lists every object in the area, keys relative to it, sorted;
	// for file:// that includes temporary files.
	Objects func(t testing.TB) []string
	// Pending counts uploads started but neither completed nor discarded
	// (S3 multipart uploads). Nil where the store keeps none it could list
	// or delete (GCS sessions expire; Azure drops uncommitted blocks at the
	// next commit or after a week).
	Pending func(t testing.TB) int
	// MissingBucket names a key in a bucket that does not exist; empty for
	// file://.
	MissingBucket string
}

// MemoryBound is the most the heap, or the resident set, may grow while a
// stream much larger than it is uploaded, and while an export holds three such uploads open.
const MemoryBound = 96 << 20

// Run runs the whole suite.
func Run(t *testing.T, tgt Target) {
	tests := []struct {
		name string
		fn   func(t *testing.T, a Area)
	}{
		{"URLs", urls},
		{"WrongConnectionType", wrongConnectionType},
		{"RoundTrip", roundTrip},
		{"PutReplaces", putReplaces},
		{"FailedPutKeepsOlderObject", failedPutKeepsOlder},
		{"OpenMissing", openMissing},
		{"MissingBucket", missingBucket},
		{"Listing", listing},
		{"ExportLandsAllAtCommit", exportLandsAllAtCommit},
		{"ExportFailureLandsNothing", exportFailureLandsNothing},
		{"ExportAbort", exportAbort},
		{"ExportConcurrentStages", exportConcurrentStages},
		{"ExportAbortDuringStage", exportAbortDuringStage},
		{"StageCancelledMidUpload", stageCancelledMidUpload},
		{"FileChangingWhileItStreams", fileChanging},
		{"BoundedMemory", boundedMemory},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, tgt.New(t)) })
	}
}

var ctx = context.Background()

// Handle is a handle on the stores this binary links (storage.Default),
// reaching the area with its connection, closed when the test ends.
func (a Area) Handle(t testing.TB, opt storage.Options) *storage.Handle {
	t.Helper()
	h := storage.Default.NewHandle(opt)
	if a.Connect != nil {
		a.Connect(h)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// Loc is the area's URL of key, parsed; an error fails the test.
func (a Area) Loc(t testing.TB, key string) storage.Location {
	t.Helper()
	return Parse(t, a.URL(key))
}

// Parse parses raw with storage.Default; an error fails the test.
func Parse(t testing.TB, raw string) storage.Location {
	t.Helper()
	loc, err := storage.Default.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// urls: the store's driver reads its own URLs, and the URL a Location
// prints parses back to it.
func urls(t *testing.T, a Area) {
	for _, key := range []string{"k", "dir/sub/file.csv", "run/manual__2026-12-01T00:00:00+00:00/report.md"} {
		raw := a.URL(key)
		loc, err := storage.Default.Parse(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if loc.Key != key && !strings.HasSuffix(loc.Key, "/"+key) {
			t.Errorf("%s: key %q, want %q", raw, loc.Key, key)
		}
		again, err := storage.Default.Parse(loc.String())
		if err != nil || again != loc {
			t.Errorf("%s prints as %s, which parses to %+v (%v)", raw, loc.String(), again, err)
		}
		if err := storage.Default.RequireLinked(raw); err != nil {
			t.Errorf("RequireLinked(%s): %v", raw, err)
		}
	}
}

// wrongConnectionType: a connection of a type the store does not take is
// refused, naming the type to create, before the store's adapter reads it.
func wrongConnectionType(t *testing.T, a Area) {
	loc := a.Loc(t, "k")
	want := storage.Default.ConnType(loc.Scheme)
	if want == "" {
		return // a store without connections (file://)
	}
	_, err := storage.Default.FromConnection(loc.Scheme, connections.Connection{ConnID: "c", ConnType: "not_" + want, Password: "pw"})
	if err == nil || !strings.Contains(err.Error(), `has type "not_`+want+`", not `+want) {
		t.Fatalf("want the type to create named, got %v", err)
	}
}

func roundTrip(t *testing.T, a Area) {
	h := a.Handle(t, storage.Options{SHA256: true})
	sizes := []int{0, 1, 100 << 10, 3<<20 + 17, storage.PartSize, storage.PartSize*2 + 12345}
	var keys []string
	for i, n := range sizes {
		key := fmt.Sprintf("round/trip-%d.bin", n)
		keys = append(keys, key)
		data := RandomBytes(n, uint64(i))
		w, err := h.Put(ctx, a.Loc(t, key), bytes.NewReader(data))
		if err != nil {
			t.Fatalf("Put %d bytes: %v", n, err)
		}
		if w.Size != int64(n) || w.SHA256 != sha256Hex(data) || w.URL != a.URL(key) {
			t.Errorf("Put %d bytes returned %+v", n, w)
		}
		if got := ReadAll(t, a, key); !bytes.Equal(got, data) {
			t.Fatalf("read back %d bytes differ from the %d written", len(got), n)
		}
	}
	// The same sizes through an export.
	e := h.NewExport()
	for i, n := range sizes {
		key := fmt.Sprintf("export/%d.bin", n)
		keys = append(keys, key)
		if _, err := e.Stage(ctx, a.Loc(t, key), bytes.NewReader(RandomBytes(n, uint64(100+i))), int64(n)); err != nil {
			t.Fatalf("Stage %d bytes: %v", n, err)
		}
	}
	if _, err := e.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for i, n := range sizes {
		if got := ReadAll(t, a, fmt.Sprintf("export/%d.bin", n)); !bytes.Equal(got, RandomBytes(n, uint64(100+i))) {
			t.Fatalf("exported %d bytes read back differently", n)
		}
	}
	AssertObjects(t, a, keys...)
}

func putReplaces(t *testing.T, a Area) {
	mustPut(t, a, "x", "old, longer content")
	mustPut(t, a, "x", "new")
	if got := string(ReadAll(t, a, "x")); got != "new" {
		t.Fatalf("got %q", got)
	}
}

func failedPutKeepsOlder(t *testing.T, a Area) {
	data := RandomBytes(storage.PartSize*2+5, 7)
	mustPut(t, a, "keep", "previous")
	// Before any byte, inside the first part, deep into a multipart upload.
	h := a.Handle(t, storage.Options{})
	for _, n := range []int{0, 1000, len(data) - 1} {
		for _, key := range []string{"new/file.bin", "keep"} {
			_, err := h.Put(ctx, a.Loc(t, key), FailAfter(data, n))
			if !errors.Is(err, ErrInjected) {
				t.Fatalf("after %d bytes: want the reader's error, got %v", n, err)
			}
			if !strings.Contains(err.Error(), a.URL(key)) {
				t.Errorf("error does not name the URL: %v", err)
			}
		}
	}
	AssertObjects(t, a, "keep")
	if got := string(ReadAll(t, a, "keep")); got != "previous" {
		t.Fatalf("previous object changed to %q", got)
	}
}

func openMissing(t *testing.T, a Area) {
	h, missing := a.Handle(t, storage.Options{}), a.Loc(t, "missing/object")
	_, err := h.Open(ctx, missing)
	if !errors.Is(err, storage.ErrNotFound) || !strings.Contains(err.Error(), a.URL("missing/object")) {
		t.Fatalf("want ErrNotFound naming the URL, got %v", err)
	}
	if err := h.Check(ctx, missing, true); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Check for reading: want ErrNotFound, got %v", err)
	}
	if err := h.Check(ctx, missing, false); err != nil {
		t.Fatalf("Check for writing a new object: %v", err)
	}
}

func missingBucket(t *testing.T, a Area) {
	if a.MissingBucket == "" {
		return // file:// has no buckets
	}
	h, missing := a.Handle(t, storage.Options{}), Parse(t, a.MissingBucket)
	for _, err := range []error{
		h.Check(ctx, missing, false),
		func() error {
			_, err := h.Put(ctx, missing, strings.NewReader("x"))
			return err
		}(),
		func() error { _, err := h.Open(ctx, missing); return err }(),
	} {
		if err == nil || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "never creates") {
			t.Fatalf("want a does-not-exist error that says the worker never creates it, got %v", err)
		}
		if !errors.Is(err, storage.ErrNoBucket) {
			t.Fatalf("a missing bucket must be storage.ErrNoBucket (storage.NoBucket), which fails a task without retries: %v", err)
		}
	}
	if err := a.Handle(t, storage.Options{}).Check(ctx, missing, false); errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("a missing bucket is reported as a missing object: %v", err)
	}
}

func exportLandsAllAtCommit(t *testing.T, a Area) {
	mustPut(t, a, "out/b.bin", "older b")
	files := map[string][]byte{
		"out/a.bin": RandomBytes(storage.PartSize+3, 1),
		"out/b.bin": RandomBytes(1000, 2),
		"out/c.bin": RandomBytes(0, 3),
	}
	h := a.Handle(t, storage.Options{SHA256: true})
	e := h.NewExport()
	defer func() { _ = e.Abort(ctx) }() // after Commit, a no-op
	for _, k := range slices.Sorted(maps.Keys(files)) {
		w, err := e.Stage(ctx, a.Loc(t, k), bytes.NewReader(files[k]), int64(len(files[k])))
		if err != nil {
			t.Fatal(err)
		}
		if w.URL != a.URL(k) || w.Size != int64(len(files[k])) || w.SHA256 != sha256Hex(files[k]) {
			t.Errorf("Stage %s returned %+v", k, w)
		}
	}
	// Staged, not landed: new destinations do not exist, the old one is as
	// it was.
	for _, k := range []string{"out/a.bin", "out/c.bin"} {
		if _, err := h.Open(ctx, a.Loc(t, k)); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("%s is visible before Commit (err=%v)", k, err)
		}
	}
	if got := string(ReadAll(t, a, "out/b.bin")); got != "older b" {
		t.Fatalf("out/b.bin changed before Commit: %q", got)
	}
	urls, err := e.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{a.URL("out/a.bin"), a.URL("out/b.bin"), a.URL("out/c.bin")}; !slices.Equal(urls, want) {
		t.Fatalf("Commit returned %v, want %v", urls, want)
	}
	for k, v := range files {
		if !bytes.Equal(ReadAll(t, a, k), v) {
			t.Fatalf("%s differs after Commit", k)
		}
	}
	AssertObjects(t, a, "out/a.bin", "out/b.bin", "out/c.bin")
	if err := e.Abort(ctx); err != nil {
		t.Fatalf("Abort after Commit: %v", err)
	}
	AssertObjects(t, a, "out/a.bin", "out/b.bin", "out/c.bin")
}

func exportFailureLandsNothing(t *testing.T, a Area) {
	mustPut(t, a, "keep/old.bin", "older")
	e := a.Handle(t, storage.Options{}).NewExport()
	big := RandomBytes(storage.PartSize*2+1, 4)
	if _, err := e.Stage(ctx, a.Loc(t, "keep/new.bin"), bytes.NewReader(big), int64(len(big))); err != nil {
		t.Fatal(err)
	}
	_, err := e.Stage(ctx, a.Loc(t, "keep/old.bin"), FailAfter(big, storage.PartSize+10), int64(len(big)))
	if !errors.Is(err, ErrInjected) || !strings.Contains(err.Error(), "will not be committed") {
		t.Fatalf("want the reader's error, saying the export will not be committed; got %v", err)
	}
	if _, err := e.Commit(ctx); err == nil || !strings.Contains(err.Error(), "no destination was changed") {
		t.Fatalf("Commit after a failed Stage: want a refusal, got %v", err)
	}
	AssertObjects(t, a, "keep/old.bin")
	if got := string(ReadAll(t, a, "keep/old.bin")); got != "older" {
		t.Fatalf("older object changed to %q", got)
	}
}

func exportAbort(t *testing.T, a Area) {
	e := a.Handle(t, storage.Options{}).NewExport()
	for _, k := range []string{"ab/one", "ab/two"} {
		data := RandomBytes(storage.PartSize+1, 5)
		if _, err := e.Stage(ctx, a.Loc(t, k), bytes.NewReader(data), -1); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	AssertObjects(t, a)
	if _, err := e.Commit(ctx); err == nil || !strings.Contains(err.Error(), "aborted") {
		t.Fatalf("Commit after Abort: got %v", err)
	}
	if _, err := e.Stage(ctx, a.Loc(t, "ab/three"), strings.NewReader("x"), 1); err == nil || !strings.Contains(err.Error(), "already aborted") {
		t.Fatalf("Stage after Abort: got %v", err)
	}
	AssertObjects(t, a)
}

func exportConcurrentStages(t *testing.T, a Area) {
	e := a.Handle(t, storage.Options{}).NewExport()
	keys := []string{"c/0", "c/1", "c/2", "c/3"}
	var wg sync.WaitGroup
	errs := make([]error, len(keys))
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.Stage(ctx, a.Loc(t, k), bytes.NewReader(RandomBytes(256<<10, uint64(i))), 256<<10)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	AssertObjects(t, a, keys...)
}

// exportAbortDuringStage aborts while a Stage is still reading: the Stage
// must fail and leave nothing, and the export must stay aborted.
func exportAbortDuringStage(t *testing.T, a Area) {
	e := a.Handle(t, storage.Options{}).NewExport()
	if _, err := e.Stage(ctx, a.Loc(t, "done"), strings.NewReader("staged before abort"), -1); err != nil {
		t.Fatal(err)
	}
	reading, release := make(chan struct{}), make(chan struct{})
	r := io.MultiReader(strings.NewReader("some bytes"), &gateReader{started: reading, release: release})
	errc := make(chan error, 1)
	go func() {
		_, err := e.Stage(ctx, a.Loc(t, "inflight"), r, -1)
		errc <- err
	}()
	<-reading
	if _, err := e.Commit(ctx); err == nil || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("Commit during a Stage: %v", err)
	}
	if err := e.Abort(ctx); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	close(release)
	if err := <-errc; err == nil || !strings.Contains(err.Error(), "aborted") {
		t.Fatalf("in-flight Stage after Abort: %v", err)
	}
	AssertObjects(t, a)
}

// stageCancelledMidUpload cancels the task's context while a multipart
// upload is under way: nothing may remain, not even unfinished uploads
// (which S3 keeps, invisibly and billed, until aborted).
func stageCancelledMidUpload(t *testing.T, a Area) {
	data := RandomBytes(2*storage.PartSize+100, 5)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e := a.Handle(t, storage.Options{}).NewExport()
	reading, release := make(chan struct{}), make(chan struct{})
	r := io.MultiReader(bytes.NewReader(data), &gateReader{started: reading, release: release})
	errc := make(chan error, 1)
	go func() {
		_, err := e.Stage(cctx, a.Loc(t, "big.bin"), r, -1)
		errc <- err
	}()
	<-reading // two parts handed over, the third is waiting for data
	cancel()
	close(release)
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("want a cancellation error, got %v", err)
	}
	if err := e.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	AssertObjects(t, a)
}

// gateReader signals its first Read, then blocks until released, then EOF.
type gateReader struct {
	started, release chan struct{}
	once             sync.Once
}

func (g *gateReader) Read([]byte) (int, error) {
	g.once.Do(func() { close(g.started) })
	<-g.release
	return 0, io.EOF
}

// fileChanging exports real files that grow and shrink while they stream:
// the export must fail before the upload completes and leave the older
// object.
func fileChanging(t *testing.T, a Area) {
	mustPut(t, a, "live.log", "older")
	for _, change := range []struct {
		name string
		do   func(f *os.File) error
	}{
		{"grows", func(f *os.File) error { _, err := f.WriteString("appended while exporting"); return err }},
		{"shrinks", func(f *os.File) error { return f.Truncate(1 << 20) }},
	} {
		t.Run(change.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "live.log")
			if err := os.WriteFile(path, RandomBytes(storage.PartSize+4096, 8), 0o644); err != nil {
				t.Fatal(err)
			}
			src, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			fi, _ := src.Stat()
			writer, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer writer.Close()
			// The change happens once the first MiB has streamed: mid-upload.
			r := &hookReader{r: src, at: 1 << 20, hook: func() error { return change.do(writer) }}
			e := a.Handle(t, storage.Options{}).NewExport()
			_, err = e.Stage(ctx, a.Loc(t, "live.log"), r, fi.Size())
			if !errors.Is(err, storage.ErrChanged) {
				t.Fatalf("want ErrChanged, got %v", err)
			}
			if !r.fired {
				t.Fatal("the file was never changed: the test proves nothing")
			}
			if err := e.Abort(ctx); err != nil {
				t.Fatal(err)
			}
			AssertObjects(t, a, "live.log")
			if got := string(ReadAll(t, a, "live.log")); got != "older" {
				t.Fatalf("older object changed to %d bytes", len(got))
			}
		})
	}
}

// boundedMemory streams far more than MemoryBound through Put, then holds
// three such uploads open in one export, and checks the heap stayed under
// the bound.
func boundedMemory(t *testing.T, a Area) {
	const size = 2 * MemoryBound
	h := a.Handle(t, storage.Options{})
	w := memwatch.Start()
	if _, err := h.Put(ctx, a.Loc(t, "mem/put.bin"), NewStream(size)); err != nil {
		t.Fatal(err)
	}
	checkMemory(t, fmt.Sprintf("Put of %d MiB", size>>20), w.Stop())
	w = memwatch.Start()
	e := h.NewExport()
	for i := 0; i < 3; i++ {
		if _, err := e.Stage(ctx, a.Loc(t, fmt.Sprintf("mem/export-%d.bin", i)), NewStream(size/3), size/3); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	checkMemory(t, fmt.Sprintf("a three-file export of %d MiB", size>>20), w.Stop())
	AssertObjects(t, a, "mem/export-0.bin", "mem/export-1.bin", "mem/export-2.bin", "mem/put.bin")
}

// checkMemory fails when what a transfer did grew the heap, or the
// resident set (which also sees part buffers kept off the heap), by more
// than MemoryBound.
func checkMemory(t *testing.T, what string, p memwatch.Peak) {
	t.Helper()
	t.Logf("%s: heap grew by %.1f MiB, resident set by %.1f MiB", what, float64(p.HeapGrowth())/(1<<20), float64(p.RSSGrowth())/(1<<20))
	if g := p.HeapGrowth(); g > MemoryBound {
		t.Fatalf("%s grew the heap by %d MiB, over the %d MiB bound", what, g>>20, MemoryBound>>20)
	}
	if g := p.RSSGrowth(); g > MemoryBound {
		t.Fatalf("%s grew the resident set by %d MiB, over the %d MiB bound", what, g>>20, MemoryBound>>20)
	}
}

// hookReader runs hook once, after at bytes were read.
type hookReader struct {
	r     io.Reader
	at    int64
	n     int64
	hook  func() error
	fired bool
}

func (h *hookReader) Read(p []byte) (int, error) {
	if !h.fired && h.n+int64(len(p)) > h.at {
		p = p[:h.at-h.n]
	}
	n, err := h.r.Read(p)
	h.n += int64(n)
	if !h.fired && h.n >= h.at {
		h.fired = true
		if herr := h.hook(); herr != nil {
			return n, herr
		}
	}
	return n, err
}

func mustPut(t *testing.T, a Area, key, content string) {
	t.Helper()
	if _, err := a.Handle(t, storage.Options{}).Put(ctx, a.Loc(t, key), strings.NewReader(content)); err != nil {
		t.Fatal(err)
	}
}

// ReadAll reads the object at key.
func ReadAll(t testing.TB, a Area, key string) []byte {
	t.Helper()
	rc, err := a.Handle(t, storage.Options{}).Open(ctx, a.Loc(t, key))
	if err != nil {
		t.Fatalf("Open %s: %v", key, err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	return got
}

// AssertObjects fails unless the area holds exactly want (and no pending
// upload).
func AssertObjects(t testing.TB, a Area, want ...string) {
	t.Helper()
	got := a.Objects(t)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("objects:\n got %q\nwant %q", got, want)
	}
	if a.Pending != nil {
		if n := a.Pending(t); n != 0 {
			t.Fatalf("%d uploads left pending", n)
		}
	}
}

// ErrInjected is the error FailAfter's reader returns.
var ErrInjected = errors.New("injected read failure")

// FailAfter yields the first n bytes of data, then fails with ErrInjected.
func FailAfter(data []byte, n int) io.Reader {
	return io.MultiReader(bytes.NewReader(data[:n]), failing{})
}

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, ErrInjected }

// RandomBytes is reproducible, incompressible test data.
func RandomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// Stream yields size bytes cycling through a random 1 MiB block: cheap to
// produce, not compressible, and never held in memory as a whole.
type Stream struct {
	block []byte
	off   int64
	size  int64
}

var streamBlock = sync.OnceValue(func() []byte { return RandomBytes(1<<20, 42) })

// NewStream returns a Stream of size bytes.
func NewStream(size int64) *Stream { return &Stream{block: streamBlock(), size: size} }

func (g *Stream) Read(p []byte) (int, error) {
	if g.off >= g.size {
		return 0, io.EOF
	}
	if rem := g.size - g.off; int64(len(p)) > rem {
		p = p[:rem]
	}
	n := 0
	for n < len(p) {
		i := (g.off + int64(n)) % int64(len(g.block))
		n += copy(p[n:], g.block[i:])
	}
	g.off += int64(n)
	return n, nil
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
