package storage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
)

// Export lands several files all-or-nothing, the way the Python provider's
// exports do: each file is first written next to its destination as
// <dest>.<12 hex>.partial (Stage); only when every file is staged are they
// moved into place (Commit). On failure the partials are removed (Abort, or
// Commit itself), so a destination holds either its old content or the
// complete new file, never a piece of one.
//
// Typical use:
//
//	e := storage.NewExport(opt)
//	defer e.Abort(ctx) // no-op after a successful Commit
//	for dest, r := range files { if _, err := e.Stage(ctx, dest, r); err != nil { return err } }
//	urls, err := e.Commit(ctx)
//
// Stage may be called from several goroutines; Commit and Abort must not run
// while a Stage is in progress. An Export is used once.
type Export struct {
	opt   Options
	token string // the 12 hex of every partial of this export

	mu       sync.Mutex
	state    exportState
	stores   map[string]store // opened once per bucket
	reserved map[string]bool  // destinations staged or being staged
	files    []*stagedFile    // staged successfully, in Stage order
	failed   []string         // destinations whose Stage failed
	inflight int
}

type exportState int

const (
	exportOpen exportState = iota
	exportCommitted
	exportAborted
)

type stagedFile struct {
	dest    location
	st      store
	partial string // key of the partial in st
	written Written
}

func (f *stagedFile) partialURL() string { return f.dest.withKey(f.partial).String() }

// NewExport starts an export with a fresh random partial suffix.
func NewExport(opt Options) *Export {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("storage: crypto/rand failed: " + err.Error()) // never happens on Linux
	}
	return &Export{
		opt:      opt,
		token:    hex.EncodeToString(b[:]),
		stores:   map[string]store{},
		reserved: map[string]bool{},
	}
}

// PartialSuffix is the ".<12 hex>.partial" this export appends to every
// destination while staging (useful to find leftovers of a killed worker).
func (e *Export) PartialSuffix() string { return "." + e.token + ".partial" }

// Stage streams r to <destURL>.<12 hex>.partial and records it for Commit.
// The returned Written names the destination, with the size and SHA-256 of
// the staged bytes. On error nothing is left at the partial or the
// destination, and Commit will refuse to land the export.
func (e *Export) Stage(ctx context.Context, destURL string, r io.Reader) (Written, error) {
	loc, err := parseURL(destURL)
	if err != nil {
		return Written{}, err
	}
	if err := checkConn(loc, e.opt); err != nil {
		return Written{}, err
	}
	st, err := e.begin(ctx, loc)
	if err != nil {
		return Written{}, err
	}
	f := &stagedFile{dest: loc, st: st, partial: loc.key + e.PartialSuffix()}
	w, werr := writeHashed(ctx, st, loc, f.partial, r, e.opt)

	e.mu.Lock()
	defer e.mu.Unlock()
	e.inflight--
	if werr == nil && e.state == exportOpen {
		f.written = w
		e.files = append(e.files, f)
		return w, nil
	}
	// The write failed, or Abort ran meanwhile. Writes are all-or-nothing,
	// but make sure: a partial left here would never be cleaned up by anyone.
	left := removeAll(ctx, []*stagedFile{f})
	if e.state != exportOpen {
		e.closeStoresIfIdle() // Abort left them open for us
	}
	if werr != nil {
		e.failed = append(e.failed, loc.String())
		return Written{}, fmt.Errorf("staging %s failed: %w; nothing was written to the destination%s; the export will not be committed",
			loc, werr, leftover(left))
	}
	return Written{}, fmt.Errorf("staging %s: the export was aborted meanwhile; the partial was removed%s", loc, leftover(left))
}

// begin reserves the destination and returns its (cached) store.
func (e *Export) begin(ctx context.Context, loc location) (store, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state != exportOpen {
		return nil, fmt.Errorf("staging %s: the export is already %s; start a new one with NewExport", loc, e.state)
	}
	if e.reserved[loc.String()] {
		return nil, fmt.Errorf("staging %s: this destination is already part of the export; each file needs its own destination", loc)
	}
	st := e.stores[loc.storeID()]
	if st == nil {
		var err error
		if st, err = openStore(ctx, loc, e.opt); err != nil {
			return nil, fmt.Errorf("staging %s: %w", loc, err)
		}
		e.stores[loc.storeID()] = st
	}
	e.reserved[loc.String()] = true
	e.inflight++
	return st, nil
}

// Commit moves every staged file into place, in Stage order, and returns
// the destination URLs. Before moving anything it checks that every partial
// is still there and that no Stage failed, so most failures change nothing.
//
// If a move fails midway, the remaining partials are removed and the error
// names the destinations already in place; the returned slice lists them
// too (it is never nil after a move happened).
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
	for _, f := range e.files {
		ok, err := f.st.exists(ctx, f.partial)
		if err == nil && !ok {
			err = ErrNotFound
		}
		if err != nil {
			left := e.finish(ctx, exportAborted, e.files)
			return nil, fmt.Errorf("export not committed: checking staged %s: %w; no destination was changed%s", f.partialURL(), err, leftover(left))
		}
	}

	inPlace := []string{}
	var notRemoved []string
	for i, f := range e.files {
		err := f.st.move(ctx, f.partial, f.dest.key, f.written.Size)
		var srcLeft *errSourceLeft
		if errors.As(err, &srcLeft) {
			// The destination is complete; only the partial stayed behind.
			inPlace = append(inPlace, f.dest.String())
			notRemoved = append(notRemoved, f.partialURL())
			continue
		}
		if err != nil {
			left := e.finish(ctx, exportAborted, e.files[i:])
			placed := "no destination was changed"
			if len(inPlace) > 0 {
				placed = "already in place: " + strings.Join(inPlace, ", ")
			}
			return inPlace, fmt.Errorf("export commit failed moving %s into %s: %v; %s; the other partials were removed%s",
				f.partialURL(), f.dest, describe(err), placed, leftover(append(notRemoved, left...)))
		}
		inPlace = append(inPlace, f.dest.String())
	}
	e.finish(ctx, exportCommitted, nil)
	if len(notRemoved) > 0 {
		return inPlace, fmt.Errorf("export committed: every destination is in place, but these partials could not be removed: %s; delete them by hand",
			strings.Join(notRemoved, ", "))
	}
	return inPlace, nil
}

// Abort removes every staged partial. It is a no-op after Commit or a
// previous Abort, so it can be deferred. The error names partials it could
// not remove.
func (e *Export) Abort(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state != exportOpen {
		return nil
	}
	if left := e.finish(ctx, exportAborted, e.files); len(left) > 0 {
		return fmt.Errorf("export aborted, but these partials could not be removed: %s; delete them by hand", strings.Join(left, ", "))
	}
	return nil
}

// finish removes the given partials, closes the stores and sets the final
// state. It returns the partials it could not remove. Called with e.mu held.
func (e *Export) finish(ctx context.Context, state exportState, remove []*stagedFile) []string {
	left := removeAll(ctx, remove)
	e.state = state
	e.closeStoresIfIdle()
	return left
}

// closeStoresIfIdle closes the stores once no Stage uses them any more (an
// Abort may run while a Stage is still writing). Called with e.mu held.
func (e *Export) closeStoresIfIdle() {
	if e.inflight > 0 {
		return
	}
	for id, st := range e.stores {
		_ = st.close()
		delete(e.stores, id)
	}
}

// removeAll deletes partials on a context that survives the caller's
// cancellation: cleanup matters most when the task is being stopped.
func removeAll(ctx context.Context, files []*stagedFile) []string {
	if len(files) == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var left []string
	for _, f := range files {
		if err := f.st.remove(cctx, f.partial); err != nil {
			left = append(left, fmt.Sprintf("%s (%v)", f.partialURL(), err))
		}
	}
	return left
}

func leftover(left []string) string {
	if len(left) == 0 {
		return ""
	}
	return "; could not remove: " + strings.Join(left, ", ") + " (delete them by hand)"
}

func describe(err error) string {
	if errors.Is(err, ErrNotFound) {
		return "the staged partial disappeared"
	}
	return err.Error()
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
