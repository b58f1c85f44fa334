package s3_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
	"github.com/airflow-sandbox/airflow-go-worker/storage/s3"
	"github.com/airflow-sandbox/airflow-go-worker/testing/s3server"
	"github.com/airflow-sandbox/airflow-go-worker/testing/storagetest"
)

func TestS3WrongCredentials(t *testing.T) {
	a, _ := s3Area(t)
	bad := *a.Options.Credentials["s3"].(*s3.AWSConfig)
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
	return areaOn(t, srv), srv
}
