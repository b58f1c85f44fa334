package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/airflow-sandbox/airflow-go-worker/internal/randhex"
)

// fileStore is the local filesystem, confined to the directories the
// worker's operator lists in FileRootsEnv. Every operation resolves its
// path to one of those roots and then runs through an os.Root, so it cannot
// leave the root even through a symlink swapped in after the check.
//
// Writes go to a temporary file next to the target (<name>.<16 hex>.tmp,
// which sweep recognises) and are renamed into place on Commit, which gives
// the all-or-nothing write; parent directories are created as needed. An
// existing destination that is not a regular file (a device such as
// /dev/null, a directory, a symlink) is refused, never replaced.
type fileStore struct{}

// fileRegistration is file:///absolute/path, the store every binary links.
var fileRegistration = Registration{Scheme: "file", ParseURL: parseFileURL, Example: "file:///absolute/path", Open: openFileStore}

// parseFileURL reads file:///absolute/path (or file://localhost/...).
func parseFileURL(u *url.URL) (Location, error) {
	if u.Host != "" && u.Host != "localhost" {
		return Location{}, fmt.Errorf("names host %q; file URLs must be local, like file:///absolute/path", u.Host)
	}
	if u.Opaque != "" || !strings.HasPrefix(u.Path, "/") {
		return Location{}, errors.New("is not an absolute file URL; write it as file:///absolute/path")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return Location{}, errors.New("has a query or fragment; remove the part after ? or #")
	}
	// A trailing "/" names a directory: checkKey refuses it for an object,
	// a listing's prefix may have it. Not path.Clean: "a/../b" would silently write elsewhere than the
	// URL reads, and with {run_id} filled in from a Dag run it could climb
	// out of the directory the author chose. checkKey refuses . and ..
	// segments, as it does for S3 keys.
	return Location{Key: strings.TrimPrefix(u.Path, "/")}, nil
}

// openFileStore opens the filesystem, the file store's one "bucket"; each
// path is held to the roots when it is used.
func openFileStore(context.Context, string, Credentials) (Driver, error) { return fileStore{}, nil }

// checkKey holds key's path to the roots, so that Handle.Check (run before
// a sandbox is created) refuses a path outside them.
func (fileStore) checkKey(key string) error {
	_, _, err := confine("/" + key)
	return err
}

// fileModeKey carries the permission bits a write should give its file.
type fileModeKey struct{}

// WithFileMode makes file:// writes on ctx create their file with perm (the
// process umask still applies) instead of 0666: an export of a 0640 file
// lands as 0640, never wider. Other stores ignore it.
func WithFileMode(ctx context.Context, perm fs.FileMode) context.Context {
	return context.WithValue(ctx, fileModeKey{}, perm.Perm())
}

func fileModeOf(ctx context.Context) fs.FileMode {
	if m, ok := ctx.Value(fileModeKey{}).(fs.FileMode); ok {
		return m
	}
	return 0o666
}

// at confines key and opens its root; the caller closes the root.
func at(key string) (*os.Root, string, error) {
	fr, rel, err := confine("/" + key)
	if err != nil {
		return nil, "", err
	}
	root, err := fr.open()
	if err != nil {
		return nil, "", err
	}
	return root, rel, nil
}

// checkReplaceable refuses a destination that exists and is not a regular
// file: renaming over /dev/null would replace the host's device with a
// regular file.
func checkReplaceable(root *os.Root, rel string) error {
	fi, err := root.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return unwrapPath(err)
	case fi.Mode().IsRegular():
		return nil
	}
	return fmt.Errorf("refusing to replace it: it exists and is not a regular file (%s); export to a file path, or remove what is there", describeMode(fi.Mode()))
}

func describeMode(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "mode " + m.String()
}

func (s fileStore) Put(ctx context.Context, key string, r io.Reader) error {
	p, err := s.Upload(ctx, key, r, -1)
	if err != nil {
		return err
	}
	return p.Commit(ctx)
}

// Upload writes r to a temporary file next to key and holds it there;
// Commit renames it into place.
func (fileStore) Upload(ctx context.Context, key string, r io.Reader, _ int64) (Pending, error) {
	root, rel, err := at(key)
	if err != nil {
		return nil, err
	}
	p, err := upload(ctx, root, rel, r)
	if err != nil {
		root.Close()
		return nil, err
	}
	return p, nil
}

func upload(ctx context.Context, root *os.Root, rel string, r io.Reader) (*filePending, error) {
	if err := checkReplaceable(root, rel); err != nil {
		return nil, err
	}
	if dir := filepath.Dir(rel); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return nil, unwrapPath(err)
		}
	}
	tmp := rel + "." + randhex.String(8) + ".tmp"
	// O_EXCL: a fresh file, never one (or a symlink) someone put there.
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileModeOf(ctx))
	if err != nil {
		return nil, unwrapPath(err)
	}
	p := &filePending{root: root, tmp: tmp, rel: rel}
	_, err = io.Copy(f, r)
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		// The bytes are durable before anyone can see the name.
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		root.Remove(tmp)
		return nil, err
	}
	return p, nil
}

// filePending is a finished temporary file waiting for its rename.
type filePending struct {
	root     *os.Root
	tmp, rel string
	done     bool
}

func (p *filePending) Commit(context.Context) error {
	if p.done {
		return errors.New("the upload was already committed or aborted")
	}
	p.done = true
	defer p.root.Close()
	// Checked again: something may have been put there since Upload.
	err := checkReplaceable(p.root, p.rel)
	if err == nil {
		err = unwrapPath(p.root.Rename(p.tmp, p.rel))
	}
	if err != nil {
		p.root.Remove(p.tmp)
		return err
	}
	// Make the new name durable too.
	d, err := p.root.Open(filepath.Dir(p.rel))
	if err != nil {
		return unwrapPath(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync of the directory: %w", err)
	}
	return nil
}

func (p *filePending) Abort(context.Context) error {
	if p.done {
		return nil
	}
	p.done = true
	defer p.root.Close()
	if err := p.root.Remove(p.tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return unwrapPath(err)
	}
	return nil
}

func (fileStore) Check(context.Context) error { return nil }

// Open reads a regular file; a directory, device or pipe is refused (a
// stage_in of /dev/zero would never end).
func (fileStore) Open(_ context.Context, key string) (io.ReadCloser, error) {
	root, rel, err := at(key)
	if err != nil {
		return nil, err
	}
	defer root.Close() // an open file outlives its root
	// O_NONBLOCK: opening a named pipe for reading would otherwise wait
	// for a writer; on a regular file it changes nothing.
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, unwrapPath(err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("it is not a regular file (%s); only regular files are read", describeMode(fi.Mode()))
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func (fileStore) Remove(_ context.Context, key string) error {
	root, rel, err := at(key)
	if err != nil {
		return err
	}
	defer root.Close()
	fi, err := root.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return unwrapPath(err)
	case fi.IsDir():
		return fmt.Errorf("refusing to remove it: it is a directory")
	}
	if err := root.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return unwrapPath(err)
	}
	return nil
}

func (fileStore) Exists(_ context.Context, key string) (bool, error) {
	root, rel, err := at(key)
	if err != nil {
		return false, err
	}
	defer root.Close()
	fi, err := root.Stat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, unwrapPath(err)
	}
	return fi.Mode().IsRegular(), nil
}

func (fileStore) Close() error { return nil }

// List walks the directory prefix names up to its last "/", and below it
// only the directories that can hold a match. Walking through the root
// never leaves it: symlinked directories are not followed, a path that
// resolves outside is refused, and only regular files are objects. A
// directory that does not exist holds nothing.
func (fileStore) List(ctx context.Context, prefix string, each func(Object) bool) error {
	dir := prefix[:strings.LastIndex(prefix, "/")+1]
	root, rel, err := at(strings.TrimSuffix(dir, "/"))
	if err != nil {
		return err
	}
	defer root.Close()
	err = fs.WalkDir(root.FS(), rel, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == rel {
				return fs.SkipAll
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == rel {
			return nil
		}
		sub := p
		if rel != "." {
			sub = strings.TrimPrefix(p, rel+"/")
		}
		key := dir + sub
		switch {
		case d.IsDir():
			if !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return fs.SkipDir
			}
			return nil
		case !d.Type().IsRegular() || !strings.HasPrefix(key, prefix) || leftoverTemp(d.Name()):
			return nil // not a file, not a match, or an upload not yet renamed into place
		}
		fi, err := d.Info()
		if err != nil {
			return nil // gone meanwhile
		}
		if !each(Object{Key: key, Size: fi.Size(), Modified: fi.ModTime()}) {
			return fs.SkipAll
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("walking /%s: %v", dir, unwrapPath(err))
	}
	return nil
}
