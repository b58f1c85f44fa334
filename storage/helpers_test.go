package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/airflow-sandbox/airflow-go-worker/testing/s3server"
)

// backend is one storage target the same tests run against.
type backend struct {
	name string
	opt  Options
	// url names key inside this test's private area.
	url func(key string) string
	// objects lists every object in the area (keys relative to it), so a
	// test can assert nothing unexpected was left anywhere.
	objects func(t testing.TB) []string
	// pendingUploads counts unfinished multipart uploads (S3 only).
	pendingUploads func(t testing.TB) int
	s3             *s3server.Server
	bucket         string
	root           string // file backend directory
}

func fileBackend(t *testing.T) backend {
	root := t.TempDir()
	return backend{
		name: "file",
		root: root,
		url:  func(key string) string { return "file://" + filepath.Join(root, key) },
		objects: func(t testing.TB) []string {
			var out []string
			err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if !d.IsDir() {
					rel, _ := filepath.Rel(root, p)
					out = append(out, rel)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			sort.Strings(out)
			return out
		},
		pendingUploads: func(testing.TB) int { return 0 },
	}
}

func s3Backend(t testing.TB) backend {
	srv := s3server.Start(t)
	const bucket = "exports"
	srv.CreateBucket(t, bucket)
	aws := srv.AWS()
	b := backend{
		name:   "s3",
		opt:    Options{AWS: &aws},
		url:    func(key string) string { return "s3://" + bucket + "/" + key },
		s3:     srv,
		bucket: bucket,
	}
	b.objects = func(t testing.TB) []string { return listKeys(t, srv, bucket) }
	b.pendingUploads = func(t testing.TB) int { return countUploads(t, srv, bucket) }
	return b
}

// forEachBackend runs fn against a local directory and a real S3 server.
func forEachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Run("file", func(t *testing.T) { fn(t, fileBackend(t)) })
	t.Run("s3", func(t *testing.T) { fn(t, s3Backend(t)) })
}

func listKeys(t testing.TB, srv *s3server.Server, bucket string) []string {
	t.Helper()
	var out []string
	p := s3.NewListObjectsV2Paginator(srv.Client(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatalf("listing %s: %v", bucket, err)
		}
		for _, o := range page.Contents {
			out = append(out, aws.ToString(o.Key))
		}
	}
	sort.Strings(out)
	return out
}

func countUploads(t testing.TB, srv *s3server.Server, bucket string) int {
	t.Helper()
	out, err := srv.Client().ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatalf("listing multipart uploads: %v", err)
	}
	return len(out.Uploads)
}

// randomBytes is reproducible, incompressible test data.
func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

var errInjected = errors.New("injected read failure")

// failingReader yields n bytes of data, then fails.
type failingReader struct{}

func failAfter(data []byte, n int) io.Reader {
	return io.MultiReader(bytes.NewReader(data[:n]), &failingReader{})
}

func (f *failingReader) Read([]byte) (int, error) { return 0, errInjected }

func readAll(t *testing.T, b backend, key string) []byte {
	t.Helper()
	rc, err := Open(context.Background(), b.url(key), b.opt)
	if err != nil {
		t.Fatalf("Open %s: %v", key, err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	return got
}

func assertObjects(t *testing.T, b backend, want ...string) {
	t.Helper()
	got := b.objects(t)
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("objects in %s:\n got %q\nwant %q", b.name, got, want)
	}
	if n := b.pendingUploads(t); n != 0 {
		t.Fatalf("%d multipart uploads left pending", n)
	}
}

func mustNotExist(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s exists (err=%v)", path, err)
	}
}
