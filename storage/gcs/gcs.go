// Package gcs is the gs://bucket/key driver of package storage, on the
// official Cloud Storage client. Importing it registers the scheme; a
// bundle that does not import it links none of Google's SDK.
//
// Uploads are resumable uploads of ChunkSize chunks. An export's upload
// (storage.Bucket.Upload) sends every chunk but the last and holds that one
// (at most ChunkSize bytes, in the writer's buffer) until Commit, which
// finalises the object: nothing is visible before, and nothing is copied.
package gcs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	gstorage "cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// ChunkSize is the size of each resumable-upload request and of the buffer
// each upload holds.
const ChunkSize = 16 << 20

func init() { storage.Register("gs", Open) }

type bucket struct {
	name   string
	client *gstorage.Client
	b      *gstorage.BucketHandle
}

// Open opens the bucket loc names with opt.GCP (nil: application default
// credentials, or STORAGE_EMULATOR_HOST's emulator).
func Open(ctx context.Context, loc storage.Location, opt storage.Options) (storage.Bucket, error) {
	opts, err := clientOptions(opt.GCP)
	if err != nil {
		return nil, err
	}
	client, err := gstorage.NewClient(ctx, opts...)
	if err != nil {
		return nil, explain(err)
	}
	return &bucket{name: loc.Bucket, client: client, b: client.Bucket(loc.Bucket)}, nil
}

func clientOptions(cfg *connections.GCPConfig) ([]option.ClientOption, error) {
	// JSON reads: the same API (and the same emulator paths) as writes;
	// no metrics exporter calling home from a worker.
	opts := []option.ClientOption{gstorage.WithJSONReads(), gstorage.WithDisabledClientMetrics(), option.WithTelemetryDisabled()}
	if cfg == nil {
		if os.Getenv("STORAGE_EMULATOR_HOST") == "" && !hasDefaultCredentials() {
			return nil, errNoCredentials
		}
		return opts, nil
	}
	if cfg.Endpoint != "" {
		opts = append(opts, option.WithEndpoint(strings.TrimSuffix(cfg.Endpoint, "/")+"/storage/v1/"))
	}
	if len(cfg.Scopes) > 0 {
		opts = append(opts, option.WithScopes(cfg.Scopes...))
	}
	switch {
	case cfg.Anonymous:
		opts = append(opts, option.WithoutAuthentication())
	case len(cfg.KeyfileJSON) > 0:
		typ, err := keyType(cfg.KeyfileJSON)
		if err != nil {
			return nil, err
		}
		opts = append(opts, option.WithAuthCredentialsJSON(typ, cfg.KeyfileJSON))
	case cfg.KeyPath != "":
		data, err := os.ReadFile(cfg.KeyPath)
		if err != nil {
			return nil, fmt.Errorf("reading the google_cloud_platform connection's key_path: %w; put the key file on the worker or use extra keyfile_dict", err)
		}
		typ, err := keyType(data)
		if err != nil {
			return nil, fmt.Errorf("key_path %s: %w", cfg.KeyPath, err)
		}
		opts = append(opts, option.WithAuthCredentialsFile(typ, cfg.KeyPath))
	default:
		if os.Getenv("STORAGE_EMULATOR_HOST") == "" && !hasDefaultCredentials() && cfg.Endpoint == "" {
			return nil, errNoCredentials
		}
	}
	return opts, nil
}

// keyType is the credential type a key JSON declares, which the client is
// told explicitly so that a key of an unexpected type is refused.
func keyType(data []byte) (option.CredentialsType, error) {
	var probe struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(data, &probe); err != nil || probe.Type == "" {
		return "", errors.New(`the Google key is not a credentials JSON with a "type" (such as service_account); use the key file Google gave you`)
	}
	return option.CredentialsType(probe.Type), nil
}

var errNoCredentials = errors.New("no Google credentials found: create a google_cloud_platform connection (extra keyfile_dict or key_path) and name it in the task (export_conn_id, storage_conn_id) or the URL (gs://conn_id@bucket/key), or give the worker GOOGLE_APPLICATION_CREDENTIALS")

// hasDefaultCredentials is a cheap look for application default
// credentials that needs no network: the variable, gcloud's file, or a GCE
// metadata server announced by the environment.
func hasDefaultCredentials() bool {
	if os.Getenv("GOOGLE_APPLICATION_CREDENTIALS") != "" || os.Getenv("GCE_METADATA_HOST") != "" {
		return true
	}
	if home, err := os.UserHomeDir(); err == nil {
		if _, err := os.Stat(home + "/.config/gcloud/application_default_credentials.json"); err == nil {
			return true
		}
	}
	// On Google's own machines the metadata server provides credentials;
	// they name themselves in the DMI product name.
	if b, err := os.ReadFile("/sys/class/dmi/id/product_name"); err == nil && strings.Contains(string(b), "Google") {
		return true
	}
	return false
}

func (b *bucket) obj(key string) *gstorage.ObjectHandle { return b.b.Object(key) }

func (b *bucket) Put(ctx context.Context, key string, r io.Reader) error {
	p, err := b.Upload(ctx, key, r, -1)
	if err != nil {
		return err
	}
	return p.Commit(ctx)
}

// Upload streams r as a resumable upload and holds its final chunk: the
// object appears only when Commit closes the writer. size, when known,
// shrinks the chunk buffer of a small object.
func (b *bucket) Upload(ctx context.Context, key string, r io.Reader, size int64) (storage.Pending, error) {
	wctx, cancel := context.WithCancel(ctx)
	w := b.obj(key).NewWriter(wctx)
	w.ContentType = "application/octet-stream"
	w.ChunkSize = chunkFor(size)
	p := &pending{w: w, cancel: cancel}
	_, err := io.Copy(w, r)
	if err == nil {
		err = ctx.Err() // writes are asynchronous: a cancellation may not have surfaced yet
	}
	if err != nil {
		_ = p.Abort(ctx)
		return nil, explain(err)
	}
	return p, nil
}

// chunkFor is the chunk size for an object of size bytes (-1: unknown): the
// writer allocates it up front, so a small object gets a small buffer.
func chunkFor(size int64) int {
	if size < 0 || size >= ChunkSize {
		return ChunkSize
	}
	const unit = 256 << 10 // the client rounds chunks to this
	return int((size/unit + 1) * unit)
}

type pending struct {
	w      *gstorage.Writer
	cancel context.CancelFunc
}

func (p *pending) Commit(context.Context) error {
	defer p.cancel()
	return explain(p.w.Close())
}

// Abort cancels the writer's context, which is how the client abandons a
// resumable upload: nothing is finalised, and the session expires.
func (p *pending) Abort(context.Context) error {
	p.cancel()
	_ = p.w.Close()
	return nil
}

func (b *bucket) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	r, err := b.obj(key).NewReader(ctx)
	if errors.Is(err, gstorage.ErrObjectNotExist) {
		if cerr := b.Check(ctx); cerr != nil {
			return nil, cerr
		}
		return nil, storage.ErrNotFound
	}
	if err != nil {
		return nil, explain(err)
	}
	return r, nil
}

func (b *bucket) Exists(ctx context.Context, key string) (bool, error) {
	_, err := b.obj(key).Attrs(ctx)
	switch {
	case errors.Is(err, gstorage.ErrObjectNotExist):
		return false, nil
	case err != nil:
		return false, explain(err)
	}
	return true, nil
}

func (b *bucket) Remove(ctx context.Context, key string) error {
	err := b.obj(key).Delete(ctx)
	if err != nil && !errors.Is(err, gstorage.ErrObjectNotExist) {
		return explain(err)
	}
	return nil
}

func (b *bucket) Check(ctx context.Context) error {
	_, err := b.b.Attrs(ctx)
	if errors.Is(err, gstorage.ErrBucketNotExist) {
		return fmt.Errorf("bucket %q does not exist; create it (the worker never creates buckets) or fix the URL", b.name)
	}
	return explain(err)
}

func (b *bucket) Close() error { return b.client.Close() }

// explain adds what to do to the errors users meet most.
func explain(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, gstorage.ErrBucketNotExist) {
		return fmt.Errorf("%w; create the bucket (the worker never creates buckets) or fix the URL", err)
	}
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		switch ge.Code {
		case http.StatusUnauthorized:
			return fmt.Errorf("%w; the Google credentials were rejected: check the google_cloud_platform connection's key", err)
		case http.StatusForbidden:
			return fmt.Errorf("%w; the credentials in use may not access this bucket: grant the service account a Storage role on it", err)
		case http.StatusNotFound:
			return fmt.Errorf("%w; the bucket does not exist: create it (the worker never creates buckets) or fix the URL", err)
		}
	}
	if strings.Contains(err.Error(), "could not find default credentials") {
		return fmt.Errorf("%w; %v", err, errNoCredentials)
	}
	return err
}
