package opensandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// fileError maps an execd file error: a 404 is ErrNotFound while the
// sandbox lives and ErrGone once it does not (the server proxy answers 404
// for both), everything else keeps its retryability.
func (d *Driver) fileError(ctx context.Context, op, id, p string, err error) error {
	var api *APIError
	if errors.As(err, &api) && api.UnknownRoute() {
		return fail(op, id, p, nil, fmt.Errorf("%w; this execd build does not have the call (the driver supports execd %s)", err, strings.Join(SupportedExecdVersions, " and ")))
	}
	if errors.As(err, &api) && api.NotFound() {
		if api.SandboxNotFound() {
			d.forget(id)
			return fail(op, id, p, sandbox.ErrGone, err)
		}
		if api.Code == "FILE_NOT_FOUND" { // execd itself answered: the sandbox lives
			return fail(op, id, p, sandbox.ErrNotFound, nil)
		}
		if _, gerr := d.record(ctx, op, id); errors.Is(gerr, sandbox.ErrGone) {
			return gerr
		}
		return fail(op, id, p, sandbox.ErrNotFound, nil)
	}
	if !errors.As(err, &api) {
		d.forget(id) // transport trouble: look the endpoint up again next time
	}
	return fail(op, id, p, nil, err)
}

// Stat describes p without following a final symlink.
func (d *Driver) Stat(ctx context.Context, id, p string) (sandbox.FileInfo, error) {
	ex, err := d.execdFor(ctx, id)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	fi, err := ex.Info(ctx, p)
	if err != nil {
		return sandbox.FileInfo{}, d.fileError(ctx, "stat", id, p, err)
	}
	return toFileInfo(fi, p), nil
}

func toFileInfo(fi FileInfo, p string) sandbox.FileInfo {
	if fi.Path != "" {
		p = fi.Path
	}
	return sandbox.FileInfo{Name: path.Base(p), Path: p, Size: fi.Size, Mode: fi.FileMode(), ModTime: fi.ModifiedAt.Time}
}

// List lists a directory's entries, sorted by name.
func (d *Driver) List(ctx context.Context, id, p string) ([]sandbox.FileInfo, error) {
	ex, err := d.execdFor(ctx, id)
	if err != nil {
		return nil, err
	}
	// execd lists a file's path as an error or an empty list depending on
	// the version; asking first gives one clear answer.
	fi, err := ex.Info(ctx, p)
	if err != nil {
		return nil, d.fileError(ctx, "list", id, p, err)
	}
	if fi.Type == "symlink" {
		if kind, _, err := d.followLink(ctx, id, p); err != nil {
			return nil, err
		} else if kind != "directory" {
			return nil, fail("list", id, p, nil, errors.New("not a directory"))
		}
		// execd refuses a symlink root; list through the resolved path.
		out, code, err := d.run(ctx, id, "readlink -f -- "+shellQuote(p))
		if err != nil || code != 0 {
			return nil, fail("list", id, p, nil, fmt.Errorf("cannot resolve the symlink: %v", err))
		}
		p = strings.TrimSpace(out)
	} else if fi.Type != "directory" {
		return nil, fail("list", id, p, nil, errors.New("not a directory"))
	}
	entries, err := ex.ListDir(ctx, p)
	if err != nil {
		return nil, d.fileError(ctx, "list", id, p, err)
	}
	out := make([]sandbox.FileInfo, 0, len(entries))
	for _, e := range entries {
		out = append(out, toFileInfo(e, path.Join(p, path.Base(e.Path))))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// followLink asks the sandbox what a symlink points at: "file",
// "directory" or "other", and the target's size. A dangling link is
// ErrNotFound.
func (d *Driver) followLink(ctx context.Context, id, p string) (string, int64, error) {
	out, code, err := d.run(ctx, id, "stat -L -c '%F|%s' -- "+shellQuote(p))
	if err != nil {
		return "", 0, err
	}
	if code != 0 {
		return "", 0, fail("read", id, p, sandbox.ErrNotFound, errors.New("the symlink's target does not exist"))
	}
	kind, size, _ := strings.Cut(strings.TrimSpace(out), "|")
	n, _ := strconv.ParseInt(size, 10, 64)
	switch kind {
	case "regular file", "regular empty file":
		return "file", n, nil
	case "directory":
		return "directory", n, nil
	}
	return "other", n, nil
}

// OpenFile checks the path with files/info, then streams a download capped
// at maxBytes+1 bytes, so a file that grew since the check fails with
// ErrTooLarge instead of streaming on.
func (d *Driver) OpenFile(ctx context.Context, id, p string, maxBytes int64) (io.ReadCloser, int64, error) {
	ex, err := d.execdFor(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	fi, err := ex.Info(ctx, p)
	if err != nil {
		return nil, 0, d.fileError(ctx, "read", id, p, err)
	}
	size := fi.Size
	switch fi.Type {
	case "file":
	case "directory":
		return nil, 0, fail("read", id, p, sandbox.ErrIsDir, nil)
	case "symlink":
		kind, n, err := d.followLink(ctx, id, p)
		if err != nil {
			return nil, 0, err
		}
		switch kind {
		case "directory":
			return nil, 0, fail("read", id, p, sandbox.ErrIsDir, nil)
		case "other":
			return nil, 0, fail("read", id, p, sandbox.ErrNotRegular, nil)
		}
		size = n
	default:
		return nil, 0, fail("read", id, p, sandbox.ErrNotRegular, nil)
	}
	if maxBytes >= 0 && size > maxBytes {
		return nil, 0, &sandbox.Error{Op: "read", Sandbox: id, Path: p, Kind: sandbox.ErrTooLarge, Err: &sandbox.TooLargeError{Path: p, Size: size, MaxBytes: maxBytes}}
	}
	limit := int64(-1)
	if maxBytes >= 0 {
		limit = maxBytes + 1
	}
	rc, err := ex.Download(ctx, p, limit)
	if errors.Is(err, sandbox.ErrIsDir) {
		return nil, 0, fail("read", id, p, sandbox.ErrIsDir, nil) // it became one since the check
	}
	if err != nil {
		return nil, 0, d.fileError(ctx, "read", id, p, err)
	}
	rc = &brokenDownload{rc: newStallGuard(rc, d.opts.StallTimeout), id: id, path: p}
	if maxBytes >= 0 {
		rc = sandbox.LimitReader(rc, rc, p, maxBytes)
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
		err = sandbox.Retryable(&sandbox.Error{Op: "read", Sandbox: b.id, Path: b.path, Err: fmt.Errorf("the download broke: %w", err)})
	}
	return n, err
}

func (b *brokenDownload) Close() error { return b.rc.Close() }

// WriteFile streams r into p with mode. execd's upload follows a symlink
// at p and writes into its target, so a symlink is removed first and the
// write replaces the link. It is removed with DELETE /directories, which
// removes the link itself: DELETE /files checks the type through the link,
// leaving a dangling link in place and refusing one to a directory.
// Parents are created by execd.
func (d *Driver) WriteFile(ctx context.Context, id, p string, r io.Reader, mode fs.FileMode) error {
	ex, err := d.execdFor(ctx, id)
	if err != nil {
		return err
	}
	fi, err := ex.Info(ctx, p)
	switch {
	case err == nil && fi.Type == "directory":
		return fail("write", id, p, sandbox.ErrIsDir, nil)
	case err == nil && fi.Type == "symlink":
		if err := ex.DeleteTree(ctx, p); err != nil {
			return d.fileError(ctx, "write", id, p, err)
		}
		if fi, err := ex.Info(ctx, p); err == nil {
			// Something recreated the path at once; never write through it.
			return sandbox.Retryable(&sandbox.Error{Op: "write", Sandbox: id, Path: p, Err: fmt.Errorf("the symlink at the path could not be replaced: a %s is there again (something in the sandbox recreates it); retry", fi.Type)})
		}
	case err != nil:
		var api *APIError
		if !errors.As(err, &api) || !api.NotFound() || api.SandboxNotFound() {
			return d.fileError(ctx, "write", id, p, err)
		}
	}
	if mode == 0 {
		mode = 0o644
	}
	if err := ex.Upload(ctx, p, r, mode); err != nil {
		return d.fileError(ctx, "write", id, p, err)
	}
	return nil
}
