// Package gcs is the gs://bucket/key driver of package storage, on Google's
// generated JSON API client (google.golang.org/api/storage/v1), the API
// the driver speaks anyway. The full Cloud Storage client
// (cloud.google.com/go/storage) would add gRPC's xDS stack, OpenTelemetry
// exporters and Arrow, paid at every task start. Importing this package
// registers the scheme; a bundle that does not import it links none of
// Google's SDK.
//
// Uploads are resumable uploads of ChunkSize chunks (resumable.go). An
// upload sends every chunk but the last and holds that one (at most
// ChunkSize bytes) until Commit, which finalises the object: nothing is
// visible before, and nothing is copied.
package gcs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
	gstorage "google.golang.org/api/storage/v1"
	htransport "google.golang.org/api/transport/http"

	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// ChunkSize is the size of each resumable-upload request and of the buffer
// each upload holds.
const ChunkSize = 16 << 20

// DefaultEndpoint is Cloud Storage's JSON API.
const DefaultEndpoint = "https://storage.googleapis.com"

func init() {
	storage.Register(storage.Registration{
		Scheme: "gs", Forms: []string{"gs", "gcs"}, ConnTypes: []string{"google_cloud_platform", "gcp"}, Open: Open,
		FromConnection: storage.Adapt(FromConnection),
	})
}

type bucket struct {
	name string
	hc   *http.Client // authenticated: the resumable uploads use it directly
	svc  *gstorage.Service
	// uploadURL is the bucket's resumable-upload endpoint.
	uploadURL string
}

// Open opens the bucket name with creds, a *Config (nil: application
// default credentials, or STORAGE_EMULATOR_HOST's emulator).
func Open(ctx context.Context, name string, creds storage.Credentials) (storage.Driver, error) {
	cfg, err := storage.CredentialsAs[*Config](creds)
	if err != nil {
		return nil, err
	}
	endpoint, opts, err := clientOptions(cfg)
	if err != nil {
		return nil, err
	}
	hc, _, err := htransport.NewClient(ctx, opts...)
	if err != nil {
		return nil, explain(err)
	}
	svc, err := gstorage.NewService(ctx, option.WithHTTPClient(hc), option.WithEndpoint(endpoint+"/storage/v1/"))
	if err != nil {
		return nil, explain(err)
	}
	return &bucket{name: name, hc: hc, svc: svc, uploadURL: endpoint + "/upload/storage/v1/b/" + url.PathEscape(name) + "/o"}, nil
}

// clientOptions are the transport's options for cfg and the endpoint (no
// trailing slash) they reach.
func clientOptions(cfg *Config) (string, []option.ClientOption, error) {
	// No OpenTelemetry wrapping of every request.
	opts := []option.ClientOption{option.WithTelemetryDisabled()}
	endpoint := DefaultEndpoint
	if cfg != nil && cfg.Endpoint != "" {
		endpoint = strings.TrimSuffix(cfg.Endpoint, "/")
	} else if host := os.Getenv("STORAGE_EMULATOR_HOST"); host != "" {
		// As Google's clients read it: an emulator that checks no
		// credentials, named by host:port or URL.
		if !strings.Contains(host, "://") {
			host = "http://" + host
		}
		return strings.TrimSuffix(host, "/"), append(opts, option.WithoutAuthentication()), nil
	}
	scopes := []string{gstorage.DevstorageFullControlScope}
	if cfg != nil && len(cfg.Scopes) > 0 {
		scopes = cfg.Scopes
	}
	opts = append(opts, option.WithScopes(scopes...))
	switch {
	case cfg == nil:
		if !hasDefaultCredentials() {
			return "", nil, errNoCredentials
		}
	case cfg.Anonymous:
		opts = append(opts, option.WithoutAuthentication())
	case len(cfg.KeyfileJSON) > 0:
		typ, err := keyType(cfg.KeyfileJSON)
		if err != nil {
			return "", nil, err
		}
		opts = append(opts, option.WithAuthCredentialsJSON(typ, cfg.KeyfileJSON))
	case cfg.KeyPath != "":
		data, err := os.ReadFile(cfg.KeyPath)
		if err != nil {
			return "", nil, fmt.Errorf("reading the google_cloud_platform connection's key_path: %w; put the key file on the worker or use extra keyfile_dict", err)
		}
		typ, err := keyType(data)
		if err != nil {
			return "", nil, fmt.Errorf("key_path %s: %w", cfg.KeyPath, err)
		}
		opts = append(opts, option.WithAuthCredentialsJSON(typ, data))
	default:
		if !hasDefaultCredentials() && cfg.Endpoint == "" {
			return "", nil, errNoCredentials
		}
	}
	return endpoint, opts, nil
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

func (b *bucket) Put(ctx context.Context, key string, r io.Reader) error {
	p, err := b.Upload(ctx, key, r, -1)
	if err != nil {
		return err
	}
	if err := p.Commit(ctx); err != nil {
		_ = p.Abort(ctx)
		return err
	}
	return nil
}

// Upload streams r as a resumable upload and holds its final chunk: the
// object appears only at Commit. size, when known, shrinks the chunk
// buffer of a small object.
func (b *bucket) Upload(ctx context.Context, key string, r io.Reader, size int64) (storage.Pending, error) {
	u := newUpload(b, key, chunkFor(size))
	err := u.stream(ctx, r)
	if err == nil {
		err = ctx.Err() // a cancelled reader may have ended with a clean EOF
	}
	if err != nil {
		_ = u.Abort(ctx)
		return nil, explain(err)
	}
	return u, nil
}

// chunkFor is the chunk size for an object of size bytes (-1: unknown):
// the buffer is allocated up front, so a small object gets a small one.
// Chunks other than the last must be multiples of 256 KiB.
func chunkFor(size int64) int {
	if size < 0 || size >= ChunkSize {
		return ChunkSize
	}
	const unit = 256 << 10
	return int((size/unit + 1) * unit)
}

func (b *bucket) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	resp, err := b.svc.Objects.Get(b.name, key).Context(ctx).Download()
	if isNotFound(err) {
		if cerr := b.Check(ctx); cerr != nil {
			return nil, cerr
		}
		return nil, storage.ErrNotFound
	}
	if err != nil {
		return nil, explain(err)
	}
	return newVerifiedBody(resp), nil
}

func (b *bucket) Exists(ctx context.Context, key string) (bool, error) {
	_, err := b.svc.Objects.Get(b.name, key).Context(ctx).Fields("name").Do()
	switch {
	case isNotFound(err):
		return false, nil
	case err != nil:
		return false, explain(err)
	}
	return true, nil
}

func (b *bucket) Remove(ctx context.Context, key string) error {
	err := b.svc.Objects.Delete(b.name, key).Context(ctx).Do()
	if err != nil && !isNotFound(err) {
		return explain(err)
	}
	return nil
}

func (b *bucket) Check(ctx context.Context) error {
	_, err := b.svc.Buckets.Get(b.name).Context(ctx).Fields("name").Do()
	if isNotFound(err) {
		return storage.NoBucket(fmt.Errorf("bucket %q does not exist; create it (the worker never creates buckets) or fix the URL", b.name))
	}
	return explain(err)
}

// List pages through the JSON API's objects.list (1000 names a page),
// asking only for what an Object holds, and stops as soon as each has had
// enough. Uploads not yet finalised are not objects there; names ending in
// "/" (the console's folders) are skipped.
func (b *bucket) List(ctx context.Context, prefix string, each func(storage.Object) bool) error {
	call := b.svc.Objects.List(b.name).Prefix(prefix).Fields("nextPageToken", "items(name,size,updated)").Context(ctx)
	for {
		page, err := call.Do()
		if err != nil {
			return explain(err)
		}
		for _, o := range page.Items {
			if strings.HasSuffix(o.Name, "/") {
				continue
			}
			modified, err := time.Parse(time.RFC3339, o.Updated)
			if err != nil {
				return fmt.Errorf("object %q of bucket %q has an update time %q that is not RFC 3339 (%v); the endpoint is not speaking Cloud Storage's JSON API: check the connection's endpoint", o.Name, b.name, o.Updated, err)
			}
			if !each(storage.Object{Key: o.Name, Size: int64(o.Size), Modified: modified}) {
				return nil
			}
		}
		if page.NextPageToken == "" {
			return nil
		}
		call.PageToken(page.NextPageToken)
	}
}

var _ storage.Lister = (*bucket)(nil)

func (b *bucket) Close() error {
	b.hc.CloseIdleConnections()
	return nil
}

func isNotFound(err error) bool {
	var ge *googleapi.Error
	return errors.As(err, &ge) && ge.Code == http.StatusNotFound
}

// explain adds what to do to the errors users meet most.
func explain(err error) error {
	if err == nil {
		return nil
	}
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		switch ge.Code {
		case http.StatusUnauthorized:
			return fmt.Errorf("%w; the Google credentials were rejected: check the google_cloud_platform connection's key", err)
		case http.StatusForbidden:
			return fmt.Errorf("%w; the credentials in use may not access this bucket: grant the service account a Storage role on it", err)
		case http.StatusNotFound:
			return storage.NoBucket(fmt.Errorf("%w; the bucket does not exist: create it (the worker never creates buckets) or fix the URL", err))
		}
	}
	if strings.Contains(err.Error(), "could not find default credentials") {
		return fmt.Errorf("%w; %v", err, errNoCredentials)
	}
	return err
}
