// Package dirstore is a store in a package of its own, built the way a new
// store is: dir://[conn_id@]bucket/key, each bucket a directory under the
// root that its connection (type dirstore, host: an absolute directory)
// names. It registers itself from init, so a bundle or a test gets dir://
// URLs, their connections and their checks by importing it, one line, and
// it passes testing/storagetest from its own test. Nothing outside this
// package names it: tests use it to show that adding a store changes
// nothing else.
package dirstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/internal/randhex"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// Scheme is the store's name and URL scheme.
const Scheme = "dir"

func init() {
	storage.Register(storage.Registration{
		Scheme: Scheme, ConnTypes: []string{"dirstore"},
		FromConnection: storage.Adapt(FromConnection), Open: Open,
	})
}

// Config is a dirstore connection: the directory holding the buckets.
type Config struct{ Root string }

// Secrets: a directory is no secret.
func (*Config) Secrets() map[string]string { return nil }

// FromConnection reads a dirstore connection; its host is the root.
func FromConnection(c connections.Connection) (Config, error) {
	if !filepath.IsAbs(c.Host) {
		return Config{}, fmt.Errorf("connection %q: host %q is not an absolute directory; set it to the directory that holds the buckets", c.ConnID, c.Host)
	}
	return Config{Root: c.Host}, nil
}

// Open opens bucket under the connection's root.
func Open(_ context.Context, name string, creds storage.Credentials) (storage.Driver, error) {
	cfg, err := storage.CredentialsAs[*Config](creds)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		return nil, errors.New("dir:// URLs have no default root; create a dirstore connection (host: the directory that holds the buckets) and name it in the URL or the task")
	}
	return &bucket{name: name, dir: filepath.Join(cfg.Root, name)}, nil
}

type bucket struct{ name, dir string }

// root opens the bucket's directory; every path below goes through it, so
// no key reaches outside it.
func (b *bucket) root() (*os.Root, error) {
	r, err := os.OpenRoot(b.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, storage.NoBucket(fmt.Errorf("bucket %q does not exist; create it (the worker never creates buckets) or fix the URL", b.name))
	}
	return r, err
}

func (b *bucket) Put(ctx context.Context, key string, r io.Reader) error {
	p, err := b.Upload(ctx, key, r, -1)
	if err != nil {
		return err
	}
	if err := p.Commit(ctx); err != nil {
		_ = p.Abort(ctx) // the temporary file must not stay behind
		return err
	}
	return nil
}

// uploadSuffix ends the temporary file an upload writes beside its key
// (<key>.<16 hex>.upload).
const uploadSuffix = ".upload"

// Upload writes key's bytes to a temporary file beside it, which Commit
// renames into place.
func (b *bucket) Upload(ctx context.Context, key string, r io.Reader, _ int64) (storage.Pending, error) {
	root, err := b.root()
	if err != nil {
		return nil, err
	}
	if err := root.MkdirAll(path.Dir(key), 0o755); err != nil {
		root.Close()
		return nil, err
	}
	p := &pending{root: root, tmp: key + "." + randhex.String(8) + uploadSuffix, key: key}
	f, err := root.OpenFile(p.tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		root.Close()
		return nil, err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = ctx.Err() // a cancelled upload lands nothing, even if its reader ended
	}
	if err != nil {
		p.Abort(context.WithoutCancel(ctx))
		return nil, err
	}
	return p, nil
}

type pending struct {
	root     *os.Root
	tmp, key string
	done     bool
}

func (p *pending) Commit(context.Context) error {
	if p.done {
		return errors.New("the upload was already committed or aborted")
	}
	if err := p.root.Rename(p.tmp, p.key); err != nil {
		return err
	}
	p.done = true
	return p.root.Close()
}

func (p *pending) Abort(context.Context) error {
	if p.done {
		return nil
	}
	p.done = true
	err := p.root.Remove(p.tmp)
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	p.root.Close()
	return err
}

func (b *bucket) Open(_ context.Context, key string) (io.ReadCloser, error) {
	root, err := b.root()
	if err != nil {
		return nil, err
	}
	f, err := root.Open(key)
	root.Close() // an open file outlives its root
	if errors.Is(err, fs.ErrNotExist) {
		return nil, storage.ErrNotFound
	}
	return f, err
}

func (b *bucket) Exists(_ context.Context, key string) (bool, error) {
	root, err := b.root()
	if err != nil {
		return false, err
	}
	defer root.Close()
	_, err = root.Stat(key)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

func (b *bucket) Remove(_ context.Context, key string) error {
	root, err := b.root()
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.Remove(key); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (b *bucket) Check(context.Context) error {
	root, err := b.root()
	if err != nil {
		return err
	}
	return root.Close()
}

// List walks the bucket's directory from the one prefix names up to its
// last "/", entering only directories that can hold a match. Objects are
// regular files (symlinks are not followed), leaving out the temporary
// files of uploads not yet committed (uploadSuffix).
func (b *bucket) List(ctx context.Context, prefix string, each func(storage.Object) bool) error {
	root, err := b.root()
	if err != nil {
		return err
	}
	defer root.Close()
	start := strings.TrimSuffix(prefix[:strings.LastIndex(prefix, "/")+1], "/")
	if start == "" {
		start = "."
	}
	err = fs.WalkDir(root.FS(), start, func(key string, d fs.DirEntry, err error) error {
		switch {
		case errors.Is(err, fs.ErrNotExist) && key == start:
			return fs.SkipAll // no such directory: nothing under the prefix
		case err != nil:
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		case key == start:
			return nil
		case d.IsDir():
			if !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return fs.SkipDir
			}
			return nil
		case !d.Type().IsRegular() || !strings.HasPrefix(key, prefix) || randhex.Suffixed(key, uploadSuffix, 16, 16):
			return nil
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed since the directory was read
		}
		if err != nil {
			return err
		}
		if !each(storage.Object{Key: key, Size: fi.Size(), Modified: fi.ModTime()}) {
			return fs.SkipAll
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("listing bucket %q: %w; check the permissions of its directory %s", b.name, err, b.dir)
	}
	return nil
}

var _ storage.Lister = (*bucket)(nil)

func (b *bucket) Close() error { return nil }
