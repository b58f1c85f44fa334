package tasks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// Storage is the object storage the tasks read inputs from and export to.
// DefaultStorage is backed by package storage (s3://, file://, ...).
type Storage interface {
	// Open streams the object at url.
	Open(ctx context.Context, url string, aws *connections.AWSConfig, log hclog.Logger) (io.ReadCloser, error)
	// NewExport starts an all-or-nothing export of files files.
	NewExport(aws *connections.AWSConfig, log hclog.Logger, files int) Exporter
}

// Exporter lands files at their destinations all or nothing: a failed export
// leaves nothing half-written anywhere.
type Exporter interface {
	// Stage streams r toward destURL and returns the bytes written. With
	// several files it writes a staging object beside destURL that Commit
	// moves into place; a one-file export, which has nothing to land
	// together with, may land it at once through an atomic upload.
	Stage(ctx context.Context, destURL string, r io.Reader) (int64, error)
	// Commit moves every staged object into place and returns their URLs.
	Commit(ctx context.Context) ([]string, error)
	// Abort removes what was staged.
	Abort(ctx context.Context) error
}

// resolveAWS reads the aws connection for storage. An empty id means the
// default AWS credential chain (and no settings for file:// URLs).
func resolveAWS(ctx context.Context, d Deps, connID, field string) (*connections.AWSConfig, error) {
	if connID == "" {
		return nil, nil
	}
	conn, err := d.Airflow.GetConnection(ctx, connID)
	if errors.Is(err, connections.ErrNotFound) {
		return nil, fmt.Errorf("%s: Airflow connection %q does not exist; create it (type aws) or remove %s to use the worker's default AWS credentials", field, connID, field)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: reading Airflow connection %q: %w", field, connID, err)
	}
	cfg, err := connections.AWSFromConnection(conn)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	if err := maskSecrets(ctx, d, connID, map[string]string{"secret access key": cfg.SecretAccessKey, "session token": cfg.SessionToken}); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return &cfg, nil
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

// DefaultStorage is package storage: s3:// and file:// URLs.
var DefaultStorage Storage = objectStorage{}

// objectStorage adapts package storage. Its own progress lines are turned
// off: the tasks log progress naming both ends of each transfer.
type objectStorage struct{}

func storageOptions(aws *connections.AWSConfig, log hclog.Logger) storage.Options {
	return storage.Options{AWS: aws, Logger: log, ProgressEvery: -1}
}

func (objectStorage) Open(ctx context.Context, url string, aws *connections.AWSConfig, log hclog.Logger) (io.ReadCloser, error) {
	return storage.Open(ctx, url, storageOptions(aws, log))
}

func (objectStorage) NewExport(aws *connections.AWSConfig, log hclog.Logger, files int) Exporter {
	opt := storageOptions(aws, log)
	if files == 1 {
		// A single file needs no staging to land all or nothing: storage.Put
		// is atomic at its URL (S3 completes a multipart upload only once
		// every part is in, file:// renames a finished temporary file), and
		// it saves the staging object's server-side copy.
		return &directExport{opt: opt}
	}
	return objectExport{storage.NewExport(opt)}
}

// directExport is the one-file export: Stage uploads straight to the
// destination; a failed upload leaves nothing there, so Abort has nothing
// to remove.
type directExport struct {
	opt  storage.Options
	urls []string
}

func (x *directExport) Stage(ctx context.Context, dest string, r io.Reader) (int64, error) {
	w, err := storage.Put(ctx, dest, r, x.opt)
	if err != nil {
		return 0, err
	}
	x.urls = append(x.urls, w.URL)
	return w.Size, nil
}

func (x *directExport) Commit(context.Context) ([]string, error) { return x.urls, nil }
func (x *directExport) Abort(context.Context) error              { return nil }

type objectExport struct{ e *storage.Export }

func (x objectExport) Stage(ctx context.Context, dest string, r io.Reader) (int64, error) {
	w, err := x.e.Stage(ctx, dest, r)
	return w.Size, err
}

func (x objectExport) Commit(ctx context.Context) ([]string, error) { return x.e.Commit(ctx) }
func (x objectExport) Abort(ctx context.Context) error              { return x.e.Abort(ctx) }

// urlConnID is the connection an s3://conn_id@bucket/key URL names, as
// Airflow's ObjectStoragePath reads it; "" when it names none.
func urlConnID(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return ""
	}
	return u.User.Username()
}

// storageConnFor picks the aws connection for a set of URLs: the explicit
// field if set, else the one the URLs name. A URL naming another connection
// than the field, or URLs naming different ones, are refused: one transfer
// runs with one identity, and guessing would write with the wrong one.
func storageConnFor(field, connID string, urls map[string]string) (string, error) {
	named := ""
	for _, p := range slices.Sorted(maps.Keys(urls)) {
		c := urlConnID(urls[p])
		switch {
		case c == "":
		case connID != "" && c != connID:
			return "", fmt.Errorf("%s is %q but %s names connection %q; use one connection", field, connID, urls[p], c)
		case named != "" && c != named:
			return "", fmt.Errorf("the URLs name two connections, %q and %q; one task transfers with one connection, so split it or use %s", named, c, field)
		default:
			named = c
		}
	}
	if connID != "" {
		return connID, nil
	}
	return named, nil
}
