package opensandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"sort"
	"strings"

	osdk "github.com/alibaba/OpenSandbox/sdks/sandbox/go"

	"github.com/airflow-sandbox/airflow-go-worker/internal/randhex"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// The file operations work on every execd build the driver is verified
// with, learning from execd's answers what it offers (see ExecdClient):
// where GET /files/info gives no type (released v1.0.18, which also
// follows symlinks there and answers a missing path with a 500), types
// come from stat in the sandbox (filecmd.go); where GET /directories/list
// is missing (v1.0.18 again), listings are made in the sandbox too.

// fileError maps an execd file error: a missing file is ErrNotFound while
// the sandbox lives and ErrGone once it does not (the server proxy answers
// 404 for both), everything else keeps its retryability.
func (d *Driver) fileError(ctx context.Context, op, id, p string, err error) error {
	var api *APIError
	if errors.As(err, &api) && api.UnknownRoute() {
		return fail(op, id, p, nil, fmt.Errorf("%w; this execd build does not have the call (the driver is verified with execd %s)", err, strings.Join(VerifiedExecd, " and ")))
	}
	if errors.As(err, &api) && api.MissingFile() { // execd itself answered: the sandbox lives
		return fail(op, id, p, driver.ErrNotFound, nil)
	}
	if errors.As(err, &api) && api.NotFound() {
		if api.SandboxNotFound() {
			d.forget(id)
			return fail(op, id, p, driver.ErrGone, err)
		}
		if _, gerr := d.record(ctx, op, id); errors.Is(gerr, driver.ErrGone) {
			return gerr
		}
		return fail(op, id, p, driver.ErrNotFound, nil)
	}
	if gone := d.goneInstead(ctx, op, id, err); gone != nil {
		return gone
	}
	return fail(op, id, p, nil, err)
}

// goneInstead tells a sandbox that has stopped from a passing fault, for
// an answer that could be either: a proxy's 502 or no answer at all (a
// stopped container's endpoint: on Docker the server reports it Failed
// for a moment before it is gone). It returns the ErrGone error when the
// server's record says so, else nil (and the endpoint is looked up again
// next time).
func (d *Driver) goneInstead(ctx context.Context, op, id string, err error) error {
	var api *APIError
	if errors.As(err, &api) && api.Status != http.StatusBadGateway {
		return nil
	}
	d.forget(id)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if _, gerr := d.record(rctx, op, id); errors.Is(gerr, driver.ErrGone) {
		return gerr
	}
	return nil
}

// lstat describes p without following a final symlink, with its Type set:
// from GET /files/info where execd gives a type, else from stat in the
// sandbox.
func (d *Driver) lstat(ctx context.Context, ex *execd, id, op, p string) (osdk.FileInfo, error) {
	if !ex.isUntyped() {
		fi, err := ex.info(ctx, p)
		switch {
		case err == nil && fi.Type != "":
			return fi, nil
		case err != nil && !ex.isUntyped():
			return osdk.FileInfo{}, d.fileError(ctx, op, id, p, err)
		}
	}
	return d.statInSandbox(ctx, id, op, p, false)
}

// follow says what p leads to, following symlinks: "file", "directory" or
// "other", and its size. A missing path or a dangling link is ErrNotFound.
func (d *Driver) follow(ctx context.Context, ex *execd, id, op, p string) (string, int64, error) {
	if !ex.isUntyped() {
		fi, err := ex.info(ctx, p)
		switch {
		case err == nil && fi.Type != "" && fi.Type != "symlink":
			return fi.Type, fi.Size, nil
		case err != nil && !ex.isUntyped():
			return "", 0, d.fileError(ctx, op, id, p, err)
		}
	}
	fi, err := d.statInSandbox(ctx, id, op, p, true)
	return fi.Type, fi.Size, err
}

// Stat describes p without following a final symlink.
func (d *Driver) Stat(ctx context.Context, id, p string) (driver.FileInfo, error) {
	ex, err := d.execdFor(ctx, id)
	if err != nil {
		return driver.FileInfo{}, err
	}
	fi, err := d.lstat(ctx, ex, id, "stat", p)
	if err != nil {
		return driver.FileInfo{}, err
	}
	return toFileInfo(fi, p), nil
}

func toFileInfo(fi osdk.FileInfo, p string) driver.FileInfo {
	if fi.Path != "" {
		p = fi.Path
	}
	return driver.FileInfo{Name: path.Base(p), Path: p, Size: fi.Size, Mode: fileMode(fi), ModTime: fi.ModifiedAt}
}

// List lists a directory's entries, sorted by name: with GET
// /directories/list where execd has it and gives types, else with a
// listing made in the sandbox. A symlink to a directory lists the
// directory.
func (d *Driver) List(ctx context.Context, id, p string) ([]driver.FileInfo, error) {
	ex, err := d.execdFor(ctx, id)
	if err != nil {
		return nil, err
	}
	var entries []osdk.FileInfo
	if !ex.isUntyped() && !ex.noListDir.Load() {
		entries, p, err = d.listByRoute(ctx, ex, id, p)
	}
	if ex.isUntyped() || ex.noListDir.Load() {
		entries, err = d.listInSandbox(ctx, id, p)
	}
	if err != nil {
		return nil, err
	}
	out := make([]driver.FileInfo, 0, len(entries))
	for _, e := range entries {
		out = append(out, toFileInfo(e, path.Join(p, path.Base(e.Path))))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// listByRoute lists with GET /directories/list, which refuses a symlink as
// its root: such a path is listed through the directory it resolves to,
// returned as the path the entries are under. When execd's answers show it
// lacks what this needs (Untyped, NoListDir), the result means nothing and
// the caller lists in the sandbox instead.
func (d *Driver) listByRoute(ctx context.Context, ex *execd, id, p string) ([]osdk.FileInfo, string, error) {
	fi, err := d.lstat(ctx, ex, id, "list", p)
	if err != nil || ex.isUntyped() {
		return nil, p, err
	}
	kind := fi.Type
	if kind == "symlink" {
		if kind, _, err = d.follow(ctx, ex, id, "list", p); err != nil {
			return nil, p, err
		}
	}
	if kind != "directory" {
		return nil, p, fail("list", id, p, nil, errors.New("not a directory"))
	}
	if fi.Type == "symlink" {
		res, err := d.run(ctx, id, "readlink -f -- "+shellQuote(p))
		if err != nil || res.code != 0 {
			return nil, p, fail("list", id, p, nil, fmt.Errorf("cannot resolve the symlink: %v%s", err, res.stderr))
		}
		p = strings.TrimSpace(res.stdout)
	}
	entries, err := ex.listDir(ctx, p)
	if err != nil && !ex.noListDir.Load() {
		return nil, p, d.fileError(ctx, "list", id, p, err)
	}
	return entries, p, nil
}

// OpenFile checks what the path leads to, then streams a download capped
// at maxBytes+1 bytes, so a file that grew since the check fails with
// ErrTooLarge instead of streaming on.
func (d *Driver) OpenFile(ctx context.Context, id, p string, maxBytes int64) (io.ReadCloser, int64, error) {
	ex, err := d.execdFor(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	kind, size, err := d.follow(ctx, ex, id, "read", p)
	if err != nil {
		return nil, 0, err
	}
	switch kind {
	case "file":
	case "directory":
		return nil, 0, fail("read", id, p, driver.ErrIsDir, nil)
	default:
		return nil, 0, fail("read", id, p, driver.ErrNotRegular, nil)
	}
	if maxBytes >= 0 && size > maxBytes {
		return nil, 0, &driver.Error{Op: "read", Sandbox: id, Path: p, Kind: driver.ErrTooLarge, Err: &driver.TooLargeError{Path: p, Size: size, MaxBytes: maxBytes}}
	}
	limit := int64(-1)
	if maxBytes >= 0 {
		limit = maxBytes + 1
	}
	rc, err := ex.download(ctx, p, limit)
	if errors.Is(err, driver.ErrIsDir) {
		return nil, 0, fail("read", id, p, driver.ErrIsDir, nil) // it became one since the check
	}
	if err != nil {
		return nil, 0, d.fileError(ctx, "read", id, p, err)
	}
	rc = &brokenDownload{rc: newStallGuard(rc, d.opts.StallTimeout), id: id, path: p}
	if maxBytes >= 0 {
		rc = driver.LimitReader(rc, rc, p, maxBytes)
	}
	return rc, size, nil
}

// brokenDownload marks a download that breaks mid-body as retryable: the
// connection failed, not the file.
type brokenDownload struct {
	rc       io.ReadCloser
	id, path string
}

func (b *brokenDownload) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && err != io.EOF {
		err = driver.Retryable(&driver.Error{Op: "read", Sandbox: b.id, Path: b.path, Err: fmt.Errorf("the download broke: %w", err)})
	}
	return n, err
}

func (b *brokenDownload) Close() error { return b.rc.Close() }

// WriteFile streams r into p with mode. execd's upload opens its path with
// truncation and follows a symlink there, writing into the link's target;
// so the data goes to a new hidden file beside p, which then replaces p by
// a rename (POST /files/mv), which never follows a link. execd refuses to
// move onto a path that exists (a dangling symlink aside, which it
// replaces), so what is there, as seen before the upload, is removed
// first: a file with DELETE /files, a symlink with DELETE /directories,
// which removes the link itself (DELETE /files checks the type through
// it); a directory is ErrIsDir before anything is sent. Parents are
// created by execd.
func (d *Driver) WriteFile(ctx context.Context, id, p string, r io.Reader, mode fs.FileMode) error {
	ex, err := d.execdFor(ctx, id)
	if err != nil {
		return err
	}
	if mode == 0 {
		mode = 0o644
	}
	// What is at p now: a directory fails before any byte is sent, and
	// what replace must remove is known without a refused move first.
	at, err := d.lstat(ctx, ex, id, "write", p)
	switch {
	case errors.Is(err, driver.ErrNotFound):
		at = osdk.FileInfo{}
	case err != nil:
		return err
	case at.Type == "directory":
		return fail("write", id, p, driver.ErrIsDir, nil)
	}
	tmp := path.Join(path.Dir(p), ".airflow-write-"+randhex.String(8))
	if err := ex.upload(ctx, tmp, r, mode); err != nil {
		err = d.fileError(ctx, "write", id, p, err)
		if !errors.Is(err, driver.ErrGone) {
			d.removeQuietly(ctx, ex, id, tmp) // a part may have been written
		}
		return err
	}
	if err := d.replace(ctx, ex, id, tmp, p, at.Type); err != nil {
		if !errors.Is(err, driver.ErrGone) {
			d.removeQuietly(ctx, ex, id, tmp)
		}
		return err
	}
	return nil
}

// replace renames tmp onto p, removing what is at p first: a thing of
// type at ("" for nothing) as seen before the upload, then whatever a
// refused move finds there.
func (d *Driver) replace(ctx context.Context, ex *execd, id, tmp, p, at string) error {
	if at != "" {
		if err := d.removeAt(ctx, ex, id, p, at); err != nil {
			return err
		}
	}
	for attempt := 0; ; attempt++ {
		err := ex.move(ctx, tmp, p)
		if err == nil {
			return nil
		}
		var api *APIError
		if !errors.As(err, &api) || !api.DestExists() {
			return d.fileError(ctx, "write", id, p, err)
		}
		if attempt == 2 {
			return driver.Retryable(&driver.Error{Op: "write", Sandbox: id, Path: p,
				Err: errors.New("the path could not be replaced: something in the sandbox keeps recreating it; retry")})
		}
		fi, err := d.lstat(ctx, ex, id, "write", p)
		switch {
		case errors.Is(err, driver.ErrNotFound):
			continue // removed meanwhile
		case err != nil:
			return err
		case fi.Type == "directory":
			return fail("write", id, p, driver.ErrIsDir, nil)
		}
		if err := d.removeAt(ctx, ex, id, p, fi.Type); err != nil {
			return err
		}
	}
}

// removeAt removes p, a thing of type at: a symlink itself with DELETE
// /directories (DELETE /files checks the type through it), anything else
// but a directory with DELETE /files. Gone already is fine.
func (d *Driver) removeAt(ctx context.Context, ex *execd, id, p, at string) error {
	var err error
	switch at {
	case "directory":
		return fail("write", id, p, driver.ErrIsDir, nil)
	case "symlink":
		err = ex.deleteTree(ctx, p)
	default:
		err = ex.deleteFile(ctx, p)
	}
	if err != nil {
		return d.fileError(ctx, "write", id, p, err)
	}
	return nil
}

// removeQuietly deletes a file the driver made, best effort, even when ctx
// is done.
func (d *Driver) removeQuietly(ctx context.Context, ex *execd, id, p string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := ex.deleteFile(dctx, p); err != nil {
		d.log.Warn("could not remove a file the driver left in the sandbox", "id", id, "path", p, "error", err)
	}
}
