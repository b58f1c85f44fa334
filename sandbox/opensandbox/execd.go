package opensandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	osdk "github.com/alibaba/OpenSandbox/sdks/sandbox/go"
)

// execd is the SDK's execd client for one sandbox, and what the driver has
// learnt from its answers about the build behind it (see files.go).
type execd struct {
	c *osdk.ExecdClient
	// long has no request timeout, for calls execd may answer late: an
	// interrupt is answered once the command's process group is gone.
	long *osdk.ExecdClient
	// base, headers and hc are execd's endpoint, the headers it needs and
	// the driver's HTTP client, for the upload the driver sends itself
	// (upload.go).
	base    string
	headers map[string]string
	hc      *http.Client

	untyped   atomic.Bool // GET /files/info has no type field (released v1.0.18)
	typed     atomic.Bool // it has one
	noListDir atomic.Bool // GET /directories/list is not a route
}

func (x *execd) ping(ctx context.Context) error {
	return callError("reach execd", x.c.Ping(ctx))
}

// interrupt stops a running command: execd sends SIGTERM to its process
// group and answers once the group is gone, SIGKILLing it after about 3 s,
// so the call is bounded by ctx rather than the request timeout. A command
// that has already finished is not an error.
func (x *execd) interrupt(ctx context.Context, id string) error {
	err := callError("interrupt command "+id, x.long.InterruptCommand(ctx, id))
	var api *APIError
	if errors.As(err, &api) && api.runtimeError() && strings.Contains(api.Message, "is not running") {
		return nil
	}
	return err
}

// perm decodes execd's mode, octal digits written as a decimal number (644).
func perm(mode int) fs.FileMode {
	p, err := strconv.ParseUint(strconv.Itoa(mode), 8, 32)
	if err != nil {
		return 0
	}
	return fs.FileMode(p) & fs.ModePerm
}

// fileMode is the Go mode of an entry: permission bits plus the type bits.
func fileMode(f osdk.FileInfo) fs.FileMode {
	m := perm(f.Mode)
	switch f.Type {
	case "directory":
		m |= fs.ModeDir
	case "symlink":
		m |= fs.ModeSymlink
	case "file":
	default:
		m |= fs.ModeIrregular
	}
	return m
}

// info describes path. Builds with a type field (after v1.0.18) lstat it:
// a final symlink is not followed. Released v1.0.18 stats it, following
// a final symlink, and gives no type (Type ""); its answer for a missing
// path is a 500 (APIError.MissingFile). Either answer records which kind
// of build this is (untyped).
func (x *execd) info(ctx context.Context, path string) (osdk.FileInfo, error) {
	op := "stat " + path
	out, err := x.c.GetFileInfo(ctx, path)
	if err = callError(op, err); err != nil {
		var api *APIError
		if errors.As(err, &api) && api.MissingFile() {
			x.learnTyped(api.Status == http.StatusNotFound)
		}
		return osdk.FileInfo{}, err
	}
	for _, fi := range out {
		x.learnTyped(fi.Type != "") // every later build sends a type for every entry
		return fi, nil              // one path asked, one answer, keyed as the server likes
	}
	return osdk.FileInfo{}, fmt.Errorf("OpenSandbox could not %s: execd answered with no entry", op)
}

func (x *execd) learnTyped(typed bool) {
	if typed {
		x.typed.Store(true)
	} else {
		x.untyped.Store(true)
	}
}

// isUntyped reports an execd whose GET /files/info was seen without a type
// field (released v1.0.18): it cannot tell files, directories and
// symlinks apart, and follows symlinks.
func (x *execd) isUntyped() bool { return x.untyped.Load() && !x.typed.Load() }

// listDir lists a directory's direct entries. Released v1.0.18 has no such
// route (an APIError with UnknownRoute, recorded: noListDir).
func (x *execd) listDir(ctx context.Context, path string) ([]osdk.FileInfo, error) {
	out, err := x.c.ListDirectoryWithDepth(ctx, path, 1)
	err = callError("list "+path, err)
	var api *APIError
	if errors.As(err, &api) && api.UnknownRoute() {
		x.noListDir.Store(true)
	}
	return out, err
}

// move renames src to dest: atomically, replacing nothing: execd refuses a
// dest that exists (APIError.DestExists), though a dangling symlink there
// is replaced. dest's parent is created.
func (x *execd) move(ctx context.Context, src, dest string) error {
	return callError("move "+src+" to "+dest, x.c.MoveFiles(ctx, osdk.MoveRequest{{Src: src, Dest: dest}}))
}

// mkdir creates path and its parents; execd applies mode to path even when
// it existed.
func (x *execd) mkdir(ctx context.Context, path string, mode fs.FileMode) error {
	return callError("create directory "+path, x.c.CreateDirectory(ctx, path, osdk.OctalMode(mode.Perm())))
}

// deleteFile removes a file (a missing one is not an error). execd checks
// the type through symlinks: a symlink to a directory is refused and a
// dangling one is left in place; remove links with deleteTree.
func (x *execd) deleteFile(ctx context.Context, path string) error {
	return callError("delete "+path, x.c.DeleteFiles(ctx, []string{path}))
}

// deleteTree removes path recursively, as rm -rf: a symlink itself, never
// its target. A missing path is not an error.
func (x *execd) deleteTree(ctx context.Context, path string) error {
	return callError("delete "+path, x.c.DeleteDirectory(ctx, path))
}

// download streams path. With limit > 0 it asks for bytes 0..limit-1 only.
// Such a range is unsatisfiable (416) only for an empty file, which is
// then what it returns. A directory is an error matching driver.ErrIsDir
// (guard.go). The caller must close the reader.
func (x *execd) download(ctx context.Context, path string, limit int64) (io.ReadCloser, error) {
	rng := ""
	if limit > 0 {
		rng = fmt.Sprintf("bytes=0-%d", limit-1)
	}
	rc, err := x.c.DownloadFile(ctx, path, rng)
	err = callError("download "+path, err)
	var api *APIError
	if rng != "" && errors.As(err, &api) && api.Status == http.StatusRequestedRangeNotSatisfiable {
		return io.NopCloser(strings.NewReader("")), nil
	}
	return rc, err
}
