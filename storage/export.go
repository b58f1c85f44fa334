package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/airflow-sandbox/airflow-go-worker/storage/parts"
)

// cleanupTimeout bounds the calls that undo a failed transfer. They run on
// a fresh context so that a cancelled task still cleans up after itself.
const cleanupTimeout = parts.CleanupTimeout

// Export lands several files all-or-nothing, the way the Python provider's
// exports do: Stage streams each file to its destination but leaves it
// invisible (an S3 multipart upload not completed, Azure blocks not
// committed, a GCS resumable upload not finalised, a temporary file not
// renamed); Commit completes them all once every file is staged. Nothing is
// copied at commit. On failure the uploads are discarded (Abort, or Commit
// itself), so a destination holds either its old content or the complete
// new file, never a piece of one.
//
// Typical use:
//
//	e := h.NewExport()
//	defer e.Abort(ctx) // no-op after a successful Commit
//	for dest, f := range files { // dest: a Location from Registry.Parse
//		if _, err := e.Stage(ctx, dest, f.r, f.size); err != nil {
//			return err
//		}
//	}
//	urls, err := e.Commit(ctx)
//
// ExampleExport runs it on file:// URLs.
//
// Stage may be called from several goroutines; Commit and Abort must not run
// while a Stage is in progress. An Export is used once. Its buckets are its
// Handle's, opened once and left open for the handle's other uses.
type Export struct {
	h   *Handle
	opt Options

	mu       sync.Mutex
	state    exportState
	reserved map[string]bool // destinations staged or being staged
	files    []*stagedFile   // staged successfully, in Stage order
	failed   []string        // destinations whose Stage failed
	inflight int
}

type exportState int

const (
	exportOpen exportState = iota
	exportCommitted
	exportAborted
)

type stagedFile struct {
	dest    Location
	pending Pending
	written Written
}

// NewExport starts an export through h.
func (h *Handle) NewExport() *Export {
	return &Export{h: h, opt: h.opt, reserved: map[string]bool{}}
}

// Stage streams r toward dest and holds it for Commit. size is the
// number of bytes r must yield, or -1 if unknown: a stream that turns out
// longer or shorter (a file something still writes) fails before its
// upload completes. The returned Written names the destination, with the
// size and SHA-256 of the staged bytes. On error nothing is left pending
// and Commit will refuse to land the export.
func (e *Export) Stage(ctx context.Context, dest Location, r io.Reader, size int64) (Written, error) {
	st, err := e.begin(ctx, dest)
	if err != nil {
		return Written{}, err
	}
	var p Pending
	if size >= 0 {
		r = &sizedReader{r: r, want: size}
	}
	w, werr := hashed(e.opt, dest, r, func(hr io.Reader) (err error) {
		p, err = st.Upload(ctx, dest.Key, hr, size)
		return err
	})

	e.mu.Lock()
	defer e.mu.Unlock()
	e.inflight--
	if werr == nil && e.state == exportOpen {
		e.files = append(e.files, &stagedFile{dest: dest, pending: p, written: w})
		return w, nil
	}
	if werr != nil {
		e.failed = append(e.failed, dest.String())
		return Written{}, fmt.Errorf("staging %s failed: %w; nothing was written to the destination; the export will not be committed", dest, werr)
	}
	// Abort ran meanwhile: nobody else will discard this upload.
	left := abortAll(ctx, []*stagedFile{{dest: dest, pending: p}})
	return Written{}, fmt.Errorf("staging %s: the export was aborted meanwhile; the upload was discarded%s", dest, leftover(left))
}

// begin reserves the destination and returns its store, which the handle
// opens the first time.
func (e *Export) begin(ctx context.Context, dest Location) (Driver, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state != exportOpen {
		return nil, fmt.Errorf("staging %s: the export is already %s; start a new one with Handle.NewExport", dest, e.state)
	}
	if e.reserved[dest.String()] {
		return nil, fmt.Errorf("staging %s: this destination is already part of the export; each file needs its own destination", dest)
	}
	b, err := e.h.open(ctx, dest, "staging ")
	if err != nil {
		return nil, err
	}
	e.reserved[dest.String()] = true
	e.inflight++
	return b.d, nil
}

// Commit completes every staged upload, in Stage order, and returns the
// destination URLs. Each commit is one small request (no data moves), so
// the window in which some destinations are new and others still old is
// short; if a commit fails in it, the remaining uploads are discarded and
// the error names the destinations already in place, which the returned
// slice lists too (it is never nil after a commit happened).
func (e *Export) Commit(ctx context.Context) ([]string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state != exportOpen {
		return nil, fmt.Errorf("commit: the export is already %s", e.state)
	}
	if e.inflight > 0 {
		return nil, fmt.Errorf("commit: %d Stage call(s) still running; wait for every Stage to return before Commit", e.inflight)
	}
	if len(e.failed) > 0 {
		left := e.finish(ctx, exportAborted, e.files)
		return nil, fmt.Errorf("export not committed because staging failed for %s; no destination was changed%s",
			strings.Join(e.failed, ", "), leftover(left))
	}
	if err := ctx.Err(); err != nil {
		left := e.finish(ctx, exportAborted, e.files)
		return nil, fmt.Errorf("export not committed: %w; no destination was changed%s", err, leftover(left))
	}
	inPlace := []string{}
	for i, f := range e.files {
		if err := f.pending.Commit(ctx); err != nil {
			left := e.finish(ctx, exportAborted, e.files[i:])
			placed := "no destination was changed"
			if len(inPlace) > 0 {
				placed = "already in place: " + strings.Join(inPlace, ", ")
			}
			return inPlace, fmt.Errorf("export commit failed at %s: %v; %s; the other uploads were discarded%s",
				f.dest, err, placed, leftover(left))
		}
		inPlace = append(inPlace, f.dest.String())
	}
	e.finish(ctx, exportCommitted, nil)
	return inPlace, nil
}

// Abort discards every staged upload. It is a no-op after Commit or a
// previous Abort, so it can be deferred. The error names uploads it could
// not discard.
func (e *Export) Abort(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state != exportOpen {
		return nil
	}
	if left := e.finish(ctx, exportAborted, e.files); len(left) > 0 {
		return fmt.Errorf("export aborted, but these uploads could not be discarded: %s; they are invisible, but remove them by hand (sweep) to stop paying for them", strings.Join(left, ", "))
	}
	return nil
}

// finish discards the given uploads and sets the final state. It returns
// the uploads it could not discard. Called with e.mu held.
func (e *Export) finish(ctx context.Context, state exportState, discard []*stagedFile) []string {
	left := abortAll(ctx, discard)
	e.state = state
	return left
}

// abortAll discards uploads on a context that survives the caller's
// cancellation: cleanup matters most when the task is being stopped.
func abortAll(ctx context.Context, files []*stagedFile) []string {
	if len(files) == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var left []string
	for _, f := range files {
		if err := f.pending.Abort(cctx); err != nil {
			left = append(left, fmt.Sprintf("%s (%v)", f.dest, err))
		}
	}
	return left
}

func leftover(left []string) string {
	if len(left) == 0 {
		return ""
	}
	return "; could not discard the uploads to: " + strings.Join(left, ", ")
}

func (s exportState) String() string {
	switch s {
	case exportCommitted:
		return "committed"
	case exportAborted:
		return "aborted"
	}
	return "open"
}

// sizedReader fails the stream, before its end reaches the store, when it
// turns out longer or shorter than announced: something wrote the file
// meanwhile, and what streamed is neither the old nor the new content.
// Failing inside the stream means the upload is discarded.
type sizedReader struct {
	r    io.Reader
	want int64
	got  int64
}

// ErrChanged is returned (wrapped) when a staged stream's length differs
// from the size given to Stage.
var ErrChanged = errors.New("the file changed while it was exported")

func (s *sizedReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.got += int64(n)
	switch {
	case s.got > s.want:
		return n, s.changed()
	case err == io.EOF && s.got < s.want:
		return n, s.changed()
	}
	return n, err
}

func (s *sizedReader) changed() error {
	return fmt.Errorf("%w (%d bytes when the export began, %d or more read); make sure nothing still writes it (is a command or the agent running?), then export again", ErrChanged, s.want, s.got)
}
