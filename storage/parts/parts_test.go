package parts

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/testing/memwatch"
)

// recorder is a Target that keeps each part's checksum, so a buffer handed
// to two parts at once, or reused while a part was still being sent, shows
// up as a wrong object. Each Part also leaves garbage behind, as an SDK's
// request does (headers, signatures, response parsing).
type recorder struct {
	garbage int

	mu        sync.Mutex
	sums      map[int]uint32
	completed int
	aborted   bool
}

var sink []byte

func (r *recorder) PutWhole(context.Context, []byte) error {
	return fmt.Errorf("PutWhole called; the test streams many parts")
}

func (r *recorder) Begin(context.Context) (Upload, error) { return r, nil }

func (r *recorder) Part(_ context.Context, n int, data []byte) error {
	g := make([]byte, r.garbage)
	for i := 0; i < len(g); i += 4096 {
		g[i] = 1 // resident, as a real request's allocations are
	}
	sum := crc32.ChecksumIEEE(data)
	r.mu.Lock()
	defer r.mu.Unlock()
	sink = g // parts arrive concurrently
	if _, dup := r.sums[n]; dup {
		return fmt.Errorf("part %d sent twice", n)
	}
	r.sums[n] = sum
	return nil
}

func (r *recorder) Complete(_ context.Context, n int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.completed = n
	return nil
}

func (r *recorder) Abort(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.aborted = true
	return nil
}

// numbered yields size bytes in which every 8 MiB part differs from the
// others, so parts sent out of place or overwritten change checksums.
type numbered struct {
	size, off int64
	block     []byte
}

func (s *numbered) Read(p []byte) (int, error) {
	if s.off >= s.size {
		return 0, io.EOF
	}
	n := copy(p, s.block[s.off%int64(len(s.block)):])
	n = int(min(int64(n), s.size-s.off))
	for i := 0; i < n; i += 4096 { // stamp the offset into each page
		p[i] = byte((s.off + int64(i)) >> 23)
	}
	s.off += int64(n)
	return n, nil
}

func newNumbered(size int64) *numbered {
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(i * 31)
	}
	return &numbered{size: size, block: block}
}

// An upload of many parts, each leaving garbage behind as an SDK request
// does, grows the resident set by its part buffers and little more, however
// many parts it sends. With the buffers on the Go heap, the collector let
// that garbage grow to the buffers' own size before it ran, so a 4 GiB
// export peaked 30 MiB above a 1 GiB one.
func TestResidentSetDoesNotGrowWithParts(t *testing.T) {
	const partSize = 8 << 20
	opt := Options{PartSize: partSize, Concurrency: 4}
	buffers := uint64(opt.Concurrency+ReadAhead+1) * partSize
	const slack = 24 << 20 // the collector's headroom over a small heap, the runtime's own

	const parts = 256
	size := int64(parts) * partSize
	rec := &recorder{garbage: 512 << 10, sums: map[int]uint32{}}
	w := memwatch.Start()
	p, err := Stream(context.Background(), newNumbered(size), rec, opt, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	peak := w.Stop()
	if peak.RSS == 0 {
		t.Fatal("no resident-set figures (/proc/self/status); this test needs Linux")
	}
	t.Logf("%d parts (%d MiB, %d MiB of garbage): resident set +%.1f MiB, heap +%.1f MiB",
		parts, size>>20, parts*rec.garbage>>20, float64(peak.RSSGrowth())/(1<<20), float64(peak.HeapGrowth())/(1<<20))
	if g := peak.RSSGrowth(); g > buffers+slack {
		t.Fatalf("the resident set grew by %d MiB, over the %d MiB of part buffers plus %d MiB", g>>20, buffers>>20, slack>>20)
	}
	if rec.completed != parts || len(rec.sums) != parts || rec.aborted {
		t.Fatalf("completed %d parts of %d (%d sent, aborted %v)", rec.completed, parts, len(rec.sums), rec.aborted)
	}
	want := newNumbered(size)
	buf := make([]byte, partSize)
	for n := 1; n <= parts; n++ {
		if _, err := io.ReadFull(want, buf); err != nil {
			t.Fatal(err)
		}
		if got := crc32.ChecksumIEEE(buf); rec.sums[n] != got {
			t.Fatalf("part %d has checksum %08x, want %08x: a buffer was reused or misplaced", n, rec.sums[n], got)
		}
	}
}
