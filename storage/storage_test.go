package storage_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/storage"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/storage/storagetest"
	"github.com/airflow-sandbox/airflow-go-worker/testing/s3server"
	"github.com/airflow-sandbox/airflow-go-worker/testing/waitwriter"
)

func TestUnsupportedScheme(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{"https://example.com/x", "ftp://host/x"} {
		_, err := storage.Put(ctx, u, strings.NewReader("x"), storage.Options{})
		if err == nil || !strings.Contains(err.Error(), "unsupported scheme") || !strings.Contains(err.Error(), "supported: s3://") {
			t.Errorf("Put %s: want an unsupported-scheme error listing the supported ones, got %v", u, err)
		}
		if _, err := storage.Open(ctx, u, storage.Options{}); err == nil || !strings.Contains(err.Error(), "unsupported scheme") {
			t.Errorf("Open %s: got %v", u, err)
		}
		if _, err := storage.NewExport(storage.Options{}).Stage(ctx, u, strings.NewReader("x"), 1); err == nil || !strings.Contains(err.Error(), "unsupported scheme") {
			t.Errorf("Stage %s: got %v", u, err)
		}
	}
}

// TestNoCredentialsSaysWhichConnectionToCreate: a URL whose store has no
// connection and finds no default credentials names the connection type to
// create, before any network call.
func TestNoCredentialsSaysWhichConnectionToCreate(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, v := range []string{"GOOGLE_APPLICATION_CREDENTIALS", "GCE_METADATA_HOST", "STORAGE_EMULATOR_HOST",
		"AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_KEY", "AZURE_STORAGE_ACCOUNT_KEY"} {
		t.Setenv(v, "")
	}
	for u, want := range map[string]string{
		"gs://b/k":     "create a google_cloud_platform connection",
		"abfs://c/k":   "create a wasb connection",
		"azblob://c/k": "create a wasb connection",
	} {
		err := storage.Check(context.Background(), u, false, storage.Options{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check %s: want %q, got %v", u, want, err)
		}
	}
}

func TestS3WrongCredentials(t *testing.T) {
	a, _ := s3Area(t)
	bad := *a.Options.Credentials["s3"].(*storage.AWSConfig)
	bad.SecretAccessKey = "this-is-the-wrong-secret"
	_, err := storage.Put(context.Background(), a.URL("k"), strings.NewReader("x"), storage.Options{Credentials: map[string]storage.Credentials{"s3": &bad}})
	if err == nil || !strings.Contains(err.Error(), "credentials were rejected") {
		t.Fatalf("want a rejected-credentials error, got %v", err)
	}
	if strings.Contains(err.Error(), bad.SecretAccessKey) {
		t.Fatalf("error leaks the secret: %v", err)
	}
	storagetest.AssertObjects(t, a)
}

func TestURLNamingAConnectionNeedsIt(t *testing.T) {
	for u, want := range map[string]string{
		"s3://my_aws@bucket/key":  "Options.Credentials",
		"gs://my_gcp@bucket/key":  "Options.Credentials",
		"abfs://my_az@cont/key":   "Options.Credentials",
		"az://my_az@cont/key":     "Options.Credentials",
		"azblob://my_az@cont/key": "Options.Credentials",
	} {
		_, err := storage.Put(context.Background(), u, strings.NewReader("x"), storage.Options{})
		if err == nil || !strings.Contains(err.Error(), `"my_`) || !strings.Contains(err.Error(), want) {
			t.Errorf("Put %s: got %v", u, err)
		}
	}
}

// TestProgressIsLogged drives a transfer that cannot finish until a
// progress line has been logged, so the assertion does not depend on timing.
func TestProgressIsLogged(t *testing.T) {
	sink := waitwriter.New("transfer progress")
	log := hclog.New(&hclog.LoggerOptions{Output: sink, Level: hclog.Info})
	a, _ := storagetest.FileArea(t)
	r := io.MultiReader(strings.NewReader("first chunk"), &waitReader{until: sink.Seen()}, strings.NewReader("rest"))
	opt := storage.Options{Logger: log, ProgressEvery: 1} // every nanosecond: the ticker fires as soon as it can
	w, err := storage.Put(context.Background(), a.URL("slow.bin"), r, opt)
	if err != nil {
		t.Fatal(err)
	}
	out := sink.String()
	for _, s := range []string{"transfer progress", "op=upload", "url=" + a.URL("slow.bin"), "mib_per_s=", "transfer finished", fmt.Sprintf("bytes=%d", w.Size)} {
		if !strings.Contains(out, s) {
			t.Errorf("log lacks %q:\n%s", s, out)
		}
	}
}

// waitReader returns EOF once until is closed (blocking until then).
type waitReader struct{ until <-chan struct{} }

func (r *waitReader) Read([]byte) (int, error) { <-r.until; return 0, io.EOF }

func TestDefaultCredentialChainFromEnvironment(t *testing.T) {
	a, srv := s3Area(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_REGION", srv.Region)
	// A host name, not an IP: only path-style addressing reaches the bucket.
	t.Setenv("AWS_ENDPOINT_URL_S3", strings.Replace(srv.Endpoint, "127.0.0.1", "localhost", 1))
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	if _, err := storage.Put(context.Background(), a.URL("from-env"), strings.NewReader("env"), storage.Options{}); err != nil {
		t.Fatalf("Put with the default chain: %v", err)
	}
	storagetest.AssertObjects(t, a, "from-env")
}

func TestAWSConfigFromConnectionReachesServer(t *testing.T) {
	a, srv := s3Area(t)
	conn := connections.Connection{ConnID: "aws_test", ConnType: "aws", Login: srv.AccessKey, Password: srv.SecretKey,
		Extra: fmt.Sprintf(`{"endpoint_url": %q, "region_name": %q}`, srv.Endpoint, srv.Region)}
	cfg, err := storage.FromConnection("s3", conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := storage.Put(context.Background(), a.URL("via-conn"), strings.NewReader("x"), storage.Options{Credentials: map[string]storage.Credentials{"s3": cfg}}); err != nil {
		t.Fatal(err)
	}
	storagetest.AssertObjects(t, a, "via-conn")
}

func TestExportRejectsDuplicateDestination(t *testing.T) {
	a, _ := storagetest.FileArea(t)
	ctx := context.Background()
	e := storage.NewExport(a.Options)
	defer e.Abort(ctx)
	if _, err := e.Stage(ctx, a.URL("same"), strings.NewReader("1"), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Stage(ctx, a.URL("same"), strings.NewReader("2"), 1); err == nil || !strings.Contains(err.Error(), "already part of the export") {
		t.Fatalf("got %v", err)
	}
}

// TestS3ExportCopiesNothing: an S3 export's files are multipart uploads
// held open, not objects copied at commit: before Commit the bucket holds
// no object at all, only one pending upload per file.
func TestS3ExportCopiesNothing(t *testing.T) {
	a, _ := s3Area(t)
	ctx := context.Background()
	e := storage.NewExport(a.Options)
	for _, k := range []string{"one", "two", "three"} {
		data := storagetest.RandomBytes(storage.PartSize+1, 1)
		if _, err := e.Stage(ctx, a.URL(k), strings.NewReader(string(data)), int64(len(data))); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.Objects(t); len(got) != 0 {
		t.Fatalf("objects before Commit: %v (staging copies are back?)", got)
	}
	if n := a.Pending(t); n != 3 {
		t.Fatalf("%d pending multipart uploads before Commit, want 3", n)
	}
	if _, err := e.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	storagetest.AssertObjects(t, a, "one", "three", "two")
}

// s3Area is a bucket on a versitygw of the test's own.
func s3Area(t testing.TB) (storagetest.Area, *s3server.Server) {
	srv := s3server.Start(t)
	return storagetest.S3Area(t, srv), srv
}
