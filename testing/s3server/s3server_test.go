package s3server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/airflow-sandbox/airflow-go-worker/testing/serverproc"
)

func TestStartServesS3AndStops(t *testing.T) {
	s := Start(t)
	s.CreateBucket(t, "bucket-one")

	ctx := context.Background()
	c := s.Client()
	body := []byte("hello from versitygw")
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bucket-one"), Key: aws.String("a/b.txt"), Body: bytes.NewReader(body)}); err != nil {
		t.Fatalf("put: %v\n%s", err, s.Output())
	}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bucket-one"), Key: aws.String("a/b.txt")})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	got, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if !bytes.Equal(got, body) {
		t.Fatalf("got %q want %q", got, body)
	}

	// Wrong credentials are refused: the server really checks signatures.
	bad := &Server{Endpoint: s.Endpoint, Region: s.Region, AccessKey: s.AccessKey, SecretKey: "not-the-secret"}
	if _, err := bad.Client().HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("bucket-one")}); err == nil {
		t.Fatal("a wrong secret key was accepted")
	}

	s.Stop()
	if resp, err := http.Get(s.Endpoint + "/"); err == nil {
		resp.Body.Close()
		t.Fatal("server still answers after Stop")
	}
	s.Stop() // idempotent
}

// When another server already holds the port, Start must not mistake its
// answers for the gateway's: the gateway cannot bind, and that is an error
// (which Start answers by trying another port).
func TestAnotherServerOnThePortIsNotTakenForTheGateway(t *testing.T) {
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "AccessDenied", http.StatusForbidden)
	}))
	t.Cleanup(other.Close)
	s, err := startOn(bin, t.TempDir(), other.Listener.Addr().String(), serverproc.Patience(t))
	if err == nil {
		s.Stop()
		t.Fatalf("a gateway was reported ready on %s, a port another server holds", other.URL)
	}
}
