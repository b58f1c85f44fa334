package tasks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// Storage is the object storage the tasks read inputs from and export to.
// DefaultStorage is backed by package storage (s3://, gs://, abfs://,
// file://).
type Storage interface {
	// Open streams the object at url.
	Open(ctx context.Context, url string, creds StorageCreds, log hclog.Logger) (io.ReadCloser, error)
	// Check fails when url cannot be used (a bucket that does not exist,
	// credentials the store refuses; with forRead, a missing object),
	// before a sandbox is provisioned. It creates nothing.
	Check(ctx context.Context, url string, forRead bool, creds StorageCreds) error
	// NewExport starts an all-or-nothing export of files files.
	NewExport(creds StorageCreds, log hclog.Logger, files int) Exporter
}

// StorageCreds are the resolved connections of one task's transfers, one
// per store, by scheme ("s3", "gs", "az"), each parsed by its store's
// driver; a store without one uses its default credentials.
type StorageCreds map[string]storage.Credentials

// Exporter lands files at their destinations all or nothing: a failed export
// leaves nothing half-written anywhere.
type Exporter interface {
	// Stage streams r (size bytes; a stream of another length fails)
	// toward destURL and returns the bytes written. The upload stays
	// invisible until Commit; a one-file export may land it at once,
	// having nothing to land together with.
	Stage(ctx context.Context, destURL string, r io.Reader, size int64) (int64, error)
	// Commit lands every staged file and returns their URLs.
	Commit(ctx context.Context) ([]string, error)
	// Abort discards what was staged.
	Abort(ctx context.Context) error
}

// resolveStorage reads the connections a set of URLs needs. field (e.g.
// export_conn_id) names connID, which applies to every URL that names no
// connection itself (scheme://conn_id@bucket/key). Each connection must be
// of the type its URLs' store needs, and each store gets one connection:
// one transfer runs with one identity per store, and guessing would write
// with the wrong one. A store with no connection uses its default chain.
func resolveStorage(ctx context.Context, d Deps, field, connID string, urls map[string]string) (StorageCreds, error) {
	return resolveStorageWith(ctx, d, field, connID, urls, storage.ParseURL)
}

// resolveStorageWith is resolveStorage for URLs that parse reads
// (storage.ParsePrefix: a listing's prefixes).
func resolveStorageWith(ctx context.Context, d Deps, field, connID string, urls map[string]string, parse func(string) (storage.Location, error)) (StorageCreds, error) {
	byScheme := map[string]string{} // store -> connection id
	namedBy := map[string]string{}  // store -> the URL or field that chose it
	for _, p := range slices.Sorted(maps.Keys(urls)) {
		raw := urls[p]
		loc, err := parse(raw)
		if err == nil {
			err = storage.RequireLinked(raw)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if loc.Scheme == "file" {
			continue
		}
		id, by := connID, field
		switch {
		case loc.ConnID == "":
		case connID != "" && loc.ConnID != connID:
			return nil, final.Errorf("%s is %q but %s names connection %q; use one connection", field, connID, storage.RedactURL(raw), loc.ConnID)
		default:
			id, by = loc.ConnID, storage.RedactURL(raw)
		}
		if prev, ok := byScheme[loc.Scheme]; ok && prev != id {
			return nil, final.Errorf("%s and %s choose two connections for %s://, %q and %q; one task transfers with one connection per store, so split it or use %s",
				namedBy[loc.Scheme], by, loc.Scheme, prev, id, field)
		}
		byScheme[loc.Scheme], namedBy[loc.Scheme] = id, by
	}
	if connID != "" && !slices.Contains(slices.Collect(maps.Values(byScheme)), connID) {
		// No URL needs it, but a misspelt id is still worth reporting now.
		if _, err := d.Airflow.GetConnection(ctx, connID); errors.Is(err, connections.ErrNotFound) {
			return nil, final.Errorf("%s: Airflow connection %q does not exist; create it or remove %s", field, connID, field)
		}
	}
	creds := StorageCreds{}
	for _, scheme := range slices.Sorted(maps.Keys(byScheme)) {
		id := byScheme[scheme]
		if id == "" {
			continue
		}
		if err := resolveOne(ctx, d, field, scheme, id, namedBy[scheme], creds); err != nil {
			return nil, err
		}
	}
	return creds, nil
}

// resolveOne reads connection id for store scheme into creds, parsed by
// the store's driver, and registers its secrets with the masker.
func resolveOne(ctx context.Context, d Deps, field, scheme, id, by string, creds StorageCreds) error {
	conn, err := d.Airflow.GetConnection(ctx, id)
	if errors.Is(err, connections.ErrNotFound) {
		return final.Errorf("%s: Airflow connection %q does not exist; create it (type %s) or remove it to use the worker's default %s credentials", by, id, storage.ConnType(scheme), scheme)
	}
	if err != nil {
		return fmt.Errorf("%s: reading Airflow connection %q: %w", by, id, err)
	}
	cfg, err := storage.FromConnection(scheme, conn)
	if err != nil {
		return fmt.Errorf("%s: %w", by, err)
	}
	creds[scheme] = cfg
	if err := maskSecrets(ctx, d, id, cfg.Secrets()); err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	return nil
}

// maskSecrets registers a connection's credentials with Airflow's secret
// masker, so that whatever might echo them (an SDK error, a debug line)
// shows *** in the task log.
func maskSecrets(ctx context.Context, d Deps, connID string, secrets map[string]string) error {
	for _, what := range slices.Sorted(maps.Keys(secrets)) {
		v := secrets[what]
		if v == "" {
			continue
		}
		if err := d.Airflow.MaskSecret(ctx, v, connID+" "+what); err != nil {
			return fmt.Errorf("registering the %s of connection %q with Airflow's secret masker failed (%v); refusing to use an unmasked credential", what, connID, err)
		}
	}
	return nil
}

// checkStorage asks each URL's store whether it can be used, so that a
// missing bucket fails the task before a sandbox is paid for.
func checkStorage(ctx context.Context, d Deps, field string, urls map[string]string, forRead bool, creds StorageCreds) error {
	for _, p := range slices.Sorted(maps.Keys(urls)) {
		if err := d.storage().Check(ctx, urls[p], forRead, creds); err != nil {
			return fmt.Errorf("%s[%q]: %w", field, p, err)
		}
	}
	return nil
}

// DefaultStorage is package storage with the drivers the bundle links
// (s3:// and file:// always; gs:// and Azure when the bundle imports
// storage/gcs and storage/azure, as the standard bundle does).
var DefaultStorage Storage = objectStorage{}

// objectStorage adapts package storage. Its own progress lines are turned
// off: the tasks log progress naming both ends of each transfer.
type objectStorage struct{}

func storageOptions(c StorageCreds, log hclog.Logger) storage.Options {
	return storage.Options{Credentials: c, Logger: log, ProgressEvery: -1}
}

func (objectStorage) Open(ctx context.Context, url string, c StorageCreds, log hclog.Logger) (io.ReadCloser, error) {
	return storage.Open(ctx, url, storageOptions(c, log))
}

func (objectStorage) Check(ctx context.Context, url string, forRead bool, c StorageCreds) error {
	return storage.Check(ctx, url, forRead, storageOptions(c, nil))
}

func (objectStorage) NewExport(c StorageCreds, log hclog.Logger, _ int) Exporter {
	return objectExport{storage.NewExport(storageOptions(c, log))}
}

type objectExport struct{ e *storage.Export }

func (x objectExport) Stage(ctx context.Context, dest string, r io.Reader, size int64) (int64, error) {
	w, err := x.e.Stage(ctx, dest, r, size)
	return w.Size, err
}

func (x objectExport) Commit(ctx context.Context) ([]string, error) { return x.e.Commit(ctx) }
func (x objectExport) Abort(ctx context.Context) error              { return x.e.Abort(ctx) }

// OpenObject streams the object at url for a Go task: its connection
// (connID, or the one the URL names; none means the store's default
// chain) is read through d.Airflow and its secrets registered with the
// masker, as the catalogue's own transfers do. {dag_id}, {run_id},
// {task_id} and {map_index} in url are filled in as in stage_in and
// exports. The caller closes it.
func OpenObject(ctx context.Context, d Deps, url, connID string) (io.ReadCloser, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	url, err := d.Run.expandURL(url)
	if err != nil {
		return nil, err
	}
	creds, err := resolveStorage(ctx, d, "conn_id", connID, map[string]string{"object": url})
	if err != nil {
		return nil, err
	}
	return d.storage().Open(ctx, url, creds, d.logger())
}

// PutObject writes size bytes from r to url, all or nothing, with the
// connection chosen and placeholders filled in as for OpenObject, and
// returns the URL written.
func PutObject(ctx context.Context, d Deps, url string, r io.Reader, size int64, connID string) (string, error) {
	if err := d.check(); err != nil {
		return "", err
	}
	url, err := d.Run.expandURL(url)
	if err != nil {
		return "", err
	}
	creds, err := resolveStorage(ctx, d, "conn_id", connID, map[string]string{"object": url})
	if err != nil {
		return "", err
	}
	x := d.storage().NewExport(creds, d.logger(), 1)
	if _, err := x.Stage(ctx, url, r, size); err != nil {
		return "", errors.Join(err, x.Abort(context.WithoutCancel(ctx)))
	}
	urls, err := x.Commit(ctx)
	if err != nil {
		return "", errors.Join(err, x.Abort(context.WithoutCancel(ctx)))
	}
	if len(urls) != 1 {
		return "", fmt.Errorf("writing %s: the store reported %d objects written", storage.RedactURL(url), len(urls))
	}
	return urls[0], nil
}
