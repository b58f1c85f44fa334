// Package storage moves bytes between io.Readers and object storage named by
// URL: file:///path, and through driver packages that register themselves
// s3://bucket/key (S3 or any S3-compatible server, storage/s3),
// gs://bucket/key (Google Cloud Storage, storage/gcs) and
// abfs://container/key with its spellings az://, abfss://, azblob:// (Azure
// Blob, storage/azure).
//
// A URL is checked once, where it enters: Registry.Parse turns it into a
// Location (Default holds the stores the binary links). A Handle is what
// transfers go through: it opens each bucket once per connection and
// reads (Open), writes (Put, Export), checks (Check) and lists (List)
// Locations in it until it is closed:
//
//	h := storage.Default.NewHandle(storage.Options{})
//	defer h.Close()
//	loc, err := storage.Default.Parse("s3://bucket/report.csv")
//	...
//	w, err := h.Put(ctx, loc, r)
//
// Transfers stream: memory use does not grow with the object's size. An S3
// or Azure upload holds at most (UploadConcurrency+parts.ReadAhead+1) ×
// PartSize bytes (56 MiB, kept off the Go heap and reused by the next
// upload) while it streams and nothing once its parts are sent; a
// GCS upload holds one chunk (gcs.ChunkSize) until it is finalised; a
// download holds one HTTP read buffer; file transfers copy in 32 KiB
// pieces. The bound is per transfer: n concurrent Stage or Put calls use n
// times as much.
//
// Writes are all-or-nothing at the URL they name: every store shows an
// object only once its upload completes (files are written under a
// temporary name and renamed into place). Export extends that to several
// files: each upload is held open until every file is staged, then all are
// completed.
//
// URLs follow URL syntax: percent-escapes in keys are decoded
// (s3://b/a%20b is the key "a b").
package storage

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
)

// ErrNotFound is returned (wrapped, with the URL) when the object to read
// does not exist, and ErrNoBucket (NoBucket) when its bucket or container
// does not: the worker never creates buckets. Test with errors.Is. Both
// are final: a task failing on one is not retried (bundles.ErrFailNoRetry).
var (
	ErrNotFound = final.New("object not found")
	ErrNoBucket = final.New("bucket does not exist")
)

// NoBucket gives a driver's own words for a missing bucket or container
// the kind ErrNoBucket.
func NoBucket(err error) error { return final.Wrap(ErrNoBucket, err) }

// Transfer tuning of the part-based stores (S3 multipart uploads, Azure
// blocks). These fix the memory an upload can use, whatever the object's
// size: UploadConcurrency parts in flight, parts.ReadAhead queued and the
// one being read, PartSize each (56 MiB), from buffers that uploads share.
const (
	PartSize          = 8 << 20
	UploadConcurrency = 4
)

// DefaultProgressEvery is how often long transfers log their progress when
// Options.ProgressEvery is zero.
const DefaultProgressEvery = 5 * time.Second

// Options configure a Handle's transfers.
type Options struct {
	// Logger receives progress lines; nil discards them.
	Logger hclog.Logger
	// ProgressEvery is the interval between progress lines; zero means
	// DefaultProgressEvery, negative disables them.
	ProgressEvery time.Duration
	// SHA256 asks for Written.SHA256. It costs one more pass over every
	// byte on the path that feeds the upload: on a 2-core machine whose
	// server also hashes, that pass alone made Put 0.8 of the SDK's own
	// uploader, so it is off unless asked for.
	SHA256 bool
}

func (o Options) logger() hclog.Logger {
	if o.Logger == nil {
		return hclog.NewNullLogger()
	}
	return o.Logger
}

func (o Options) every() time.Duration {
	if o.ProgressEvery == 0 {
		return DefaultProgressEvery
	}
	return o.ProgressEvery
}

// Written describes an object that was written completely.
type Written struct {
	URL    string // canonical URL of the object (for an Export stage: its destination)
	Size   int64  // bytes written
	SHA256 string // hex SHA-256 of those bytes, when Options.SHA256 asked for it
}

// hashed runs write on r, counting (and with opt.SHA256 hashing) what
// went through and logging progress.
func hashed(opt Options, dest Location, r io.Reader, write func(io.Reader) error) (Written, error) {
	hr := &hashingReader{r: r, p: startProgress(opt, "upload", dest.String())}
	if opt.SHA256 {
		hr.h = sha256.New()
	}
	err := write(hr)
	hr.p.Finish()
	if err != nil {
		return Written{}, err
	}
	w := Written{URL: dest.String(), Size: hr.n}
	if hr.h != nil {
		w.SHA256 = hex.EncodeToString(hr.h.Sum(nil))
	}
	return w, nil
}

// hashingReader counts (and, with h, hashes) what the store consumed.
type hashingReader struct {
	r io.Reader
	h hash.Hash
	n int64
	p *Progress
}

func (hr *hashingReader) Read(b []byte) (int, error) {
	n, err := hr.r.Read(b)
	if n > 0 {
		if hr.h != nil {
			hr.h.Write(b[:n])
		}
		hr.n += int64(n)
		hr.p.Add(n)
	}
	return n, err
}

// Progress logs the bytes and rate of one transfer at a fixed interval,
// from its own goroutine, so a stalled transfer still reports (with a zero
// rate), and a final line for a transfer long enough to have shown any. It
// is the one progress logger: package storage's own transfers use it, and
// the tasks use it for transfers between storage and a sandbox.
type Progress struct {
	n     atomic.Int64
	stop  chan struct{}
	done  chan struct{}
	start time.Time
}

// StartProgress starts logging to log every interval (negative: never)
// with the key-value pairs kv naming the transfer. Call Finish when it
// ends.
func StartProgress(log hclog.Logger, every time.Duration, kv ...any) *Progress {
	p := &Progress{start: time.Now()}
	if every < 0 || log == nil {
		return p
	}
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.done)
		t := time.NewTicker(every)
		defer t.Stop()
		last, lastAt, logged := int64(0), p.start, false
		for {
			select {
			case <-p.stop:
				if logged {
					n := p.n.Load()
					log.Info("transfer finished", append(kv, "bytes", n, "mib_per_s", mibPerSec(n, time.Since(p.start)))...)
				}
				return
			case now := <-t.C:
				n := p.n.Load()
				log.Info("transfer progress", append(kv, "bytes", n, "mib_per_s", mibPerSec(n-last, now.Sub(lastAt)))...)
				last, lastAt, logged = n, now, true
			}
		}
	}()
	return p
}

func startProgress(opt Options, op, url string) *Progress {
	return StartProgress(opt.logger(), opt.every(), "op", op, "url", redactURL(url))
}

// Add counts n more bytes moved.
func (p *Progress) Add(n int) { p.n.Add(int64(n)) }

// Bytes is how many bytes were counted.
func (p *Progress) Bytes() int64 { return p.n.Load() }

// Reader counts what is read from r.
func (p *Progress) Reader(r io.Reader) io.Reader { return progressReader{r, p} }

type progressReader struct {
	r io.Reader
	p *Progress
}

func (c progressReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.p.Add(n)
	return n, err
}

// Finish stops the progress goroutine; safe to call more than once.
func (p *Progress) Finish() {
	if p.stop == nil {
		return
	}
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

func mibPerSec(n int64, d time.Duration) string {
	if d <= 0 {
		return "0.0"
	}
	return fmt.Sprintf("%.1f", float64(n)/(1<<20)/d.Seconds())
}
