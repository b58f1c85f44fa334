package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/connections"

	"github.com/airflow-sandbox/airflow-go-worker/testing/waitwriter"
)

func TestPutOpenRoundTrip(t *testing.T) {
	sizes := []int{0, 1, 100 << 10, 3<<20 + 17, PartSize*2 + 12345} // the last is a multipart upload on S3
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		var keys []string
		for i, n := range sizes {
			key := fmt.Sprintf("round/trip-%d.bin", n)
			keys = append(keys, key)
			data := randomBytes(n, uint64(i))
			w, err := Put(ctx, b.url(key), bytes.NewReader(data), b.opt)
			if err != nil {
				t.Fatalf("Put %d bytes: %v", n, err)
			}
			if w.Size != int64(n) {
				t.Errorf("Written.Size = %d, want %d", w.Size, n)
			}
			if w.SHA256 != sha256Hex(data) {
				t.Errorf("Written.SHA256 = %s, want %s", w.SHA256, sha256Hex(data))
			}
			if w.URL != b.url(key) {
				t.Errorf("Written.URL = %s, want %s", w.URL, b.url(key))
			}
			if got := readAll(t, b, key); !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes differ from the %d written", len(got), n)
			}
		}
		assertObjects(t, b, keys...)
	})
}

func TestPutReplacesExisting(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		if _, err := Put(ctx, b.url("x"), strings.NewReader("old, longer content"), b.opt); err != nil {
			t.Fatal(err)
		}
		if _, err := Put(ctx, b.url("x"), strings.NewReader("new"), b.opt); err != nil {
			t.Fatal(err)
		}
		if got := string(readAll(t, b, "x")); got != "new" {
			t.Fatalf("got %q", got)
		}
	})
}

func TestPutReaderFailureLeavesNothing(t *testing.T) {
	data := randomBytes(PartSize*2+5, 7)
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		// A previous version must survive a failed replacement untouched.
		if _, err := Put(ctx, b.url("keep"), strings.NewReader("previous"), b.opt); err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{0, 1000, len(data) - 1} { // before, inside the first part, deep into a multipart upload
			for _, key := range []string{"new/file.bin", "keep"} {
				_, err := Put(ctx, b.url(key), failAfter(data, n), b.opt)
				if !errors.Is(err, errInjected) {
					t.Fatalf("after %d bytes: want the reader's error, got %v", n, err)
				}
				if !strings.Contains(err.Error(), b.url(key)) {
					t.Errorf("error does not name the URL: %v", err)
				}
			}
		}
		assertObjects(t, b, "keep")
		if got := string(readAll(t, b, "keep")); got != "previous" {
			t.Fatalf("previous object changed to %q", got)
		}
	})
}

func TestOpenNotFound(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		_, err := Open(context.Background(), b.url("missing/object"), b.opt)
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("want ErrNotFound, got %v", err)
		}
		if !strings.Contains(err.Error(), b.url("missing/object")) {
			t.Errorf("error does not name the URL: %v", err)
		}
	})
}

func TestUnsupportedScheme(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{"gs://bucket/key", "az://container/blob", "https://example.com/x"} {
		_, err := Put(ctx, u, strings.NewReader("x"), Options{})
		if err == nil || !strings.Contains(err.Error(), "unsupported scheme") || !strings.Contains(err.Error(), "supported: s3://") {
			t.Errorf("Put %s: want an unsupported-scheme error listing the supported ones, got %v", u, err)
		}
		if _, err := Open(ctx, u, Options{}); err == nil || !strings.Contains(err.Error(), "unsupported scheme") {
			t.Errorf("Open %s: got %v", u, err)
		}
		if _, err := NewExport(Options{}).Stage(ctx, u, strings.NewReader("x")); err == nil || !strings.Contains(err.Error(), "unsupported scheme") {
			t.Errorf("Stage %s: got %v", u, err)
		}
	}
}

func TestS3MissingBucketIsNeverCreated(t *testing.T) {
	b := s3Backend(t)
	ctx := context.Background()
	_, err := Put(ctx, "s3://no-such-bucket/k", strings.NewReader("x"), b.opt)
	if err == nil || !strings.Contains(err.Error(), "never creates buckets") {
		t.Fatalf("want a missing-bucket error with advice, got %v", err)
	}
	if _, err := b.s3.Client().HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("no-such-bucket")}); err == nil {
		t.Fatal("the bucket was created")
	}
	if _, err := Open(ctx, "s3://no-such-bucket/k", b.opt); err == nil || !strings.Contains(err.Error(), "bucket does not exist") {
		t.Fatalf("Open: want a missing-bucket error, got %v", err)
	}
}

func TestS3WrongCredentials(t *testing.T) {
	b := s3Backend(t)
	bad := *b.opt.AWS
	bad.SecretAccessKey = "this-is-the-wrong-secret"
	_, err := Put(context.Background(), b.url("k"), strings.NewReader("x"), Options{AWS: &bad})
	if err == nil || !strings.Contains(err.Error(), "credentials were rejected") {
		t.Fatalf("want a rejected-credentials error, got %v", err)
	}
	if strings.Contains(err.Error(), bad.SecretAccessKey) {
		t.Fatalf("error leaks the secret: %v", err)
	}
	assertObjects(t, b)
}

func TestS3URLNamingAConnectionNeedsIt(t *testing.T) {
	_, err := Put(context.Background(), "s3://my_aws@bucket/key", strings.NewReader("x"), Options{})
	if err == nil || !strings.Contains(err.Error(), `"my_aws"`) || !strings.Contains(err.Error(), "Options.AWS") {
		t.Fatalf("got %v", err)
	}
}

// TestProgressIsLogged drives a transfer that cannot finish until a
// progress line has been logged, so the assertion does not depend on timing.
func TestProgressIsLogged(t *testing.T) {
	sink := waitwriter.New("transfer progress")
	log := hclog.New(&hclog.LoggerOptions{Output: sink, Level: hclog.Info})
	b := fileBackend(t)
	r := io.MultiReader(strings.NewReader("first chunk"), &waitReader{until: sink.Seen()}, strings.NewReader("rest"))
	opt := Options{Logger: log, ProgressEvery: 1} // every nanosecond: the ticker fires as soon as it can
	w, err := Put(context.Background(), b.url("slow.bin"), r, opt)
	if err != nil {
		t.Fatal(err)
	}
	out := sink.String()
	for _, s := range []string{"transfer progress", "op=upload", "url=" + b.url("slow.bin"), "mib_per_s=", "transfer finished", fmt.Sprintf("bytes=%d", w.Size)} {
		if !strings.Contains(out, s) {
			t.Errorf("log lacks %q:\n%s", s, out)
		}
	}
}

// waitReader returns EOF once until is closed (blocking until then).
type waitReader struct{ until <-chan struct{} }

func (r *waitReader) Read([]byte) (int, error) { <-r.until; return 0, io.EOF }

func TestDefaultCredentialChainFromEnvironment(t *testing.T) {
	b := s3Backend(t)
	t.Setenv("AWS_ACCESS_KEY_ID", b.s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", b.s3.SecretKey)
	t.Setenv("AWS_REGION", b.s3.Region)
	// A host name, not an IP: only path-style addressing reaches the bucket.
	t.Setenv("AWS_ENDPOINT_URL_S3", strings.Replace(b.s3.Endpoint, "127.0.0.1", "localhost", 1))
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	if _, err := Put(context.Background(), b.url("from-env"), strings.NewReader("env"), Options{}); err != nil {
		t.Fatalf("Put with the default chain: %v", err)
	}
	assertObjects(t, b, "from-env")
}

func TestAWSConfigFromConnectionReachesServer(t *testing.T) {
	b := s3Backend(t)
	conn := connections.Connection{ConnID: "aws_test", ConnType: "aws", Login: b.s3.AccessKey, Password: b.s3.SecretKey,
		Extra: fmt.Sprintf(`{"endpoint_url": %q, "region_name": %q}`, b.s3.Endpoint, b.s3.Region)}
	cfg, err := connections.AWSFromConnection(conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Put(context.Background(), b.url("via-conn"), strings.NewReader("x"), Options{AWS: &cfg}); err != nil {
		t.Fatal(err)
	}
	assertObjects(t, b, "via-conn")
}
