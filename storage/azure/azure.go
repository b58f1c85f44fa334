// Package azure is the Azure Blob driver of package storage, for
// abfs://container/key and its spellings az://, abfss:// and azblob://, on
// the official azblob SDK. Importing it registers the scheme; a bundle that
// does not import it links none of Azure's SDK.
//
// Uploads stage blocks of storage.PartSize, UploadConcurrency at a time,
// and commit the block list: at once for Put, at Commit for an export, so
// an export lands its files without copying them. Uncommitted blocks of an
// aborted upload cannot be deleted without touching the blob (and the older
// version it may hold); Azure discards them at the next commit to that
// blob, or after a week.
package azure

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/internal/randhex"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/airflow-sandbox/airflow-go-worker/storage"
	"github.com/airflow-sandbox/airflow-go-worker/storage/parts"
)

func init() {
	storage.Register(storage.Registration{
		Scheme: "az", Forms: []string{"abfs", "abfss", "az", "azblob"}, ParseURL: parseURL, Example: "abfs://container/key",
		Refuse: map[string]string{"wasb": hadoopForm("wasb"), "wasbs": hadoopForm("wasbs"),
			"adl": "adl:// is Azure Data Lake Gen1, which Azure retired; write abfs://container/key for Blob storage"},
		ConnTypes: []string{"wasb"}, Open: Open, FromConnection: storage.Adapt(FromConnection),
	})
}

func hadoopForm(form string) string {
	return form + ":// is Hadoop's form, whose user part is the container; write abfs://container/key (the account comes from the wasb connection) or abfs://container@account.dfs.core.windows.net/key"
}

// parseURL reads scheme://[conn_id@]container/key, and adlfs's
// scheme://container@account.dfs.core.windows.net/key: a host with a dot
// cannot be a container (container names have none), so there the user
// part is the container, not a connection, and the Location's Bucket is
// container@account-host.
func parseURL(u *url.URL) (storage.Location, error) {
	loc, err := storage.ParseBucketURL(u, "wasb", "container")
	if err != nil || !strings.Contains(loc.Bucket, ".") {
		return loc, err
	}
	if loc.ConnID == "" {
		form := strings.ToLower(u.Scheme)
		return storage.Location{}, fmt.Errorf("names an account host but no container; write it as %s://container@%s/key or %s://container/key", form, loc.Bucket, form)
	}
	loc.Bucket, loc.ConnID = loc.ConnID+"@"+loc.Bucket, ""
	return loc, nil
}

var blockParts = parts.Options{PartSize: storage.PartSize, Concurrency: storage.UploadConcurrency}

type bucket struct {
	name string
	c    *container.Client
}

// Open opens the container name (container@account-host when the URL
// named the account), with creds, a *Config (nil: the AZURE_STORAGE_*
// environment variables).
func Open(_ context.Context, name string, creds storage.Credentials) (storage.Driver, error) {
	cfg, err := storage.CredentialsAs[*Config](creds)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		cfg = fromEnv()
	}
	if cfg == nil {
		return nil, errNoCredentials
	}
	container, account, _ := strings.Cut(name, "@")
	client, err := serviceClient(*cfg, account)
	if err != nil {
		return nil, err
	}
	return &bucket{name: container, c: client.ServiceClient().NewContainerClient(container)}, nil
}

var errNoCredentials = errors.New("no Azure credentials found: create a wasb connection (login = account name, password = account key, or extra sas_token or connection_string) and name it in the task (export_conn_id, storage_conn_id) or the URL (abfs://conn_id@container/key), or give the worker AZURE_STORAGE_CONNECTION_STRING")

// fromEnv reads the variables adlfs and the Azure CLI use.
func fromEnv() *Config {
	if cs := os.Getenv("AZURE_STORAGE_CONNECTION_STRING"); cs != "" {
		return &Config{ConnectionString: cs}
	}
	account := firstEnv("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT")
	key := firstEnv("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_KEY")
	sas := strings.TrimPrefix(os.Getenv("AZURE_STORAGE_SAS_TOKEN"), "?")
	if account == "" || (key == "" && sas == "") {
		return nil
	}
	return &Config{AccountName: account, AccountURL: "https://" + account + ".blob.core.windows.net/", AccountKey: key, SASToken: sas}
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// serviceClient signs in as cfg says. urlAccount is the account host a URL
// named (account.dfs.core.windows.net), which must agree with cfg.
func serviceClient(cfg Config, urlAccount string) (*azblob.Client, error) {
	if cfg.ConnectionString != "" {
		c, err := azblob.NewClientFromConnectionString(cfg.ConnectionString, nil)
		if err != nil {
			return nil, fmt.Errorf("the wasb connection_string is not usable (%v); copy it again from the storage account's Access keys page", redactErr(err, cfg))
		}
		return c, nil
	}
	serviceURL := cfg.AccountURL
	if urlAccount != "" {
		name, _, _ := strings.Cut(urlAccount, ".")
		if cfg.AccountName != "" && !strings.EqualFold(name, cfg.AccountName) {
			return nil, fmt.Errorf("the URL names storage account %q but the wasb connection is for %q; use a connection for that account or drop the account from the URL", name, cfg.AccountName)
		}
		serviceURL = "https://" + strings.Replace(urlAccount, ".dfs.", ".blob.", 1) + "/"
		cfg.AccountName = name
	}
	if serviceURL == "" {
		return nil, errNoCredentials
	}
	if cfg.AccountKey != "" {
		cred, err := azblob.NewSharedKeyCredential(cfg.AccountName, cfg.AccountKey)
		if err != nil {
			return nil, fmt.Errorf("the wasb connection's account key is not valid base64 (%v); copy the key again from the storage account's Access keys page", err)
		}
		return azblob.NewClientWithSharedKeyCredential(serviceURL, cred, nil)
	}
	if cfg.SASToken != "" {
		u, err := url.Parse(serviceURL)
		if err != nil {
			return nil, fmt.Errorf("the wasb connection's account URL is not a URL: %w", err)
		}
		u.RawQuery = cfg.SASToken
		return azblob.NewClientWithNoCredential(u.String(), nil)
	}
	return nil, errNoCredentials
}

// redactErr keeps a connection string's key out of an SDK error.
func redactErr(err error, cfg Config) string {
	msg := err.Error()
	for _, part := range strings.Split(cfg.ConnectionString, ";") {
		if k, v, ok := strings.Cut(part, "="); ok && v != "" && (strings.EqualFold(k, "AccountKey") || strings.EqualFold(k, "SharedAccessSignature")) {
			msg = strings.ReplaceAll(msg, v, "xxxxx")
		}
	}
	return msg
}

func (b *bucket) blob(key string) *blockblob.Client { return b.c.NewBlockBlobClient(key) }

func (b *bucket) Put(ctx context.Context, key string, r io.Reader) error {
	p, err := parts.Stream(ctx, r, b.target(key), blockParts, true)
	if err != nil {
		return explain(err)
	}
	return explain(p.Commit(ctx))
}

// Upload stages every block and leaves the block list uncommitted until
// Commit.
func (b *bucket) Upload(ctx context.Context, key string, r io.Reader, _ int64) (storage.Pending, error) {
	p, err := parts.Stream(ctx, r, b.target(key), blockParts, false)
	if err != nil {
		return nil, explain(err)
	}
	return explained{p}, nil
}

type explained struct{ p *parts.Pending }

func (e explained) Commit(ctx context.Context) error { return explain(e.p.Commit(ctx)) }
func (e explained) Abort(ctx context.Context) error  { return explain(e.p.Abort(ctx)) }

func (b *bucket) target(key string) *target { return &target{bb: b.blob(key)} }

// target is one blob's upload. Block ids are "<16 hex>-<8 digits>": random
// per upload, so a concurrent or aborted upload to the same blob never
// mixes blocks with this one, and all of the same length, as Azure needs.
type target struct {
	bb    *blockblob.Client
	token string
}

var octetStream = "application/octet-stream"

func (t *target) PutWhole(ctx context.Context, data []byte) error {
	_, err := t.bb.Upload(ctx, streaming.NopCloser(bytes.NewReader(data)), &blockblob.UploadOptions{
		HTTPHeaders: &blob.HTTPHeaders{BlobContentType: &octetStream},
	})
	return err
}

func (t *target) Begin(context.Context) (parts.Upload, error) {
	t.token = randhex.String(8)
	return t, nil
}

func (t *target) id(n int) string {
	return base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "%s-%08d", t.token, n))
}

func (t *target) Part(ctx context.Context, n int, data []byte) error {
	_, err := t.bb.StageBlock(ctx, t.id(n), streaming.NopCloser(bytes.NewReader(data)), nil)
	return err
}

func (t *target) Complete(ctx context.Context, n int) error {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = t.id(i + 1)
	}
	_, err := t.bb.CommitBlockList(ctx, ids, &blockblob.CommitBlockListOptions{
		HTTPHeaders: &blob.HTTPHeaders{BlobContentType: &octetStream},
	})
	return err
}

// Abort has nothing it may delete: see the package comment.
func (t *target) Abort(context.Context) error { return nil }

func (b *bucket) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	resp, err := b.blob(key).DownloadStream(ctx, nil)
	if bloberror.HasCode(err, bloberror.BlobNotFound) {
		return nil, storage.ErrNotFound
	}
	if err != nil {
		return nil, explain(err)
	}
	return resp.Body, nil
}

func (b *bucket) Exists(ctx context.Context, key string) (bool, error) {
	_, err := b.blob(key).GetProperties(ctx, nil)
	switch {
	case bloberror.HasCode(err, bloberror.BlobNotFound):
		return false, nil
	case err != nil && bloberror.HasCode(err, bloberror.ContainerNotFound):
		return false, explain(err)
	case err != nil && strings.Contains(err.Error(), "404"):
		// HEAD answers carry no error code: a 404 is the blob or the
		// container; ask which.
		if cerr := b.Check(ctx); cerr != nil {
			return false, cerr
		}
		return false, nil
	case err != nil:
		return false, explain(err)
	}
	return true, nil
}

func (b *bucket) Remove(ctx context.Context, key string) error {
	_, err := b.blob(key).Delete(ctx, nil)
	if err != nil && !bloberror.HasCode(err, bloberror.BlobNotFound) {
		return explain(err)
	}
	return nil
}

func (b *bucket) Check(ctx context.Context) error {
	_, err := b.c.GetProperties(ctx, nil)
	if bloberror.HasCode(err, bloberror.ContainerNotFound) || (err != nil && strings.Contains(err.Error(), "404")) {
		return storage.NoBucket(fmt.Errorf("container %q does not exist; create it (the worker never creates containers) or fix the URL", b.name))
	}
	return explain(err)
}

// List pages through the container's flat blob listing (5000 a page) and
// stops as soon as each has had enough. Blobs whose blocks are staged but
// not committed are not listed (the listing does not include them unless
// asked). Directories are skipped: names ending in "/", and on accounts
// with a hierarchical namespace (Data Lake Gen2, which abfs:// names) the
// empty blobs that stand for directories, marked hdi_isfolder.
func (b *bucket) List(ctx context.Context, prefix string, each func(storage.Object) bool) error {
	pages := b.c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix, Include: container.ListBlobsInclude{Metadata: true}})
	for pages.More() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return explain(err) // a missing container is storage.NoBucket
		}
		for _, item := range page.Segment.BlobItems {
			o, ok := listed(item)
			if !ok {
				continue
			}
			if !each(o) {
				return nil
			}
		}
	}
	return nil
}

var _ storage.Lister = (*bucket)(nil)

// listed is the object a listed blob is; false for a directory.
func listed(item *container.BlobItem) (storage.Object, bool) {
	name := deref(item.Name)
	if strings.HasSuffix(name, "/") {
		return storage.Object{}, false
	}
	for k, v := range item.Metadata {
		if strings.EqualFold(k, "hdi_isfolder") && v != nil && strings.EqualFold(*v, "true") {
			return storage.Object{}, false
		}
	}
	o := storage.Object{Key: name}
	if p := item.Properties; p != nil {
		o.Size = deref(p.ContentLength)
		o.Modified = deref(p.LastModified)
	}
	return o, true
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func (b *bucket) Close() error { return nil }

// explain adds what to do to the errors users meet most.
func explain(err error) error {
	switch {
	case err == nil:
		return nil
	case bloberror.HasCode(err, bloberror.ContainerNotFound):
		return storage.NoBucket(fmt.Errorf("%w; the container does not exist: create it (the worker never creates containers) or fix the URL", err))
	case bloberror.HasCode(err, bloberror.AuthenticationFailed, bloberror.InvalidAuthenticationInfo):
		return fmt.Errorf("%w; the Azure credentials were rejected: check the wasb connection's account key, SAS token or connection string", err)
	case bloberror.HasCode(err, bloberror.AuthorizationFailure, bloberror.AuthorizationPermissionMismatch, bloberror.InsufficientAccountPermissions):
		return fmt.Errorf("%w; the credentials in use may not write here: check the SAS token's permissions or the account's access policy", err)
	}
	return err
}
