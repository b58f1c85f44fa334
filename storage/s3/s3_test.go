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
	good, _ := a.Handle(t, storage.Options{}).Credentials("s3", "")
	bad := *good.(*s3.AWSConfig)
	bad.SecretAccessKey = "this-is-the-wrong-secret"
	h := storage.Default.NewHandle(storage.Options{})
	defer h.Close()
	h.Connect("s3", "", &bad)
	_, err := h.Put(context.Background(), a.Loc(t, "k"), strings.NewReader("x"))
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
	h := storage.Default.NewHandle(storage.Options{}) // connected to nothing: the default chain
	defer h.Close()
	if _, err := h.Put(context.Background(), a.Loc(t, "from-env"), strings.NewReader("env")); err != nil {
		t.Fatalf("Put with the default chain: %v", err)
	}
	storagetest.AssertObjects(t, a, "from-env")
}

func TestAWSConfigFromConnectionReachesServer(t *testing.T) {
	a, srv := s3Area(t)
	conn := connections.Connection{ConnID: "aws_test", ConnType: "aws", Login: srv.AccessKey, Password: srv.SecretKey,
		Extra: fmt.Sprintf(`{"endpoint_url": %q, "region_name": %q}`, srv.Endpoint, srv.Region)}
	cfg, err := storage.Default.FromConnection("s3", conn)
	if err != nil {
		t.Fatal(err)
	}
	h := storage.Default.NewHandle(storage.Options{})
	defer h.Close()
	h.Connect("s3", "aws_test", cfg)
	loc := a.Loc(t, "via-conn")
	loc.ConnID = "aws_test" // as a task's export_conn_id chooses it
	if _, err := h.Put(context.Background(), loc, strings.NewReader("x")); err != nil {
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
	e := a.Handle(t, storage.Options{}).NewExport()
	for _, k := range []string{"one", "two", "three"} {
		data := storagetest.RandomBytes(storage.PartSize+1, 1)
		if _, err := e.Stage(ctx, a.Loc(t, k), strings.NewReader(string(data)), int64(len(data))); err != nil {
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
