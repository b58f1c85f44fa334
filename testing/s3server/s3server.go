// Package s3server starts a real S3 server for tests: versitygw (Apache-2.0)
// serving a temporary directory through its posix backend on 127.0.0.1.
//
// Tests use it instead of mocks so that multipart uploads, server-side copies
// and error codes behave as a real S3 endpoint does.
package s3server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"github.com/airflow-sandbox/airflow-go-worker/internal/randhex"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/testing/serverproc"
)

// Module is the versitygw version the helper installs when none is found.
const Module = "github.com/versity/versitygw/cmd/versitygw@v1.8.0"

// startTimeout bounds how long Launch waits for the gateway to answer
// outside a test (the demo, the airflow-e2e driver); a test waits until
// near its deadline (serverproc.Patience).
const startTimeout = 30 * time.Second

// Server is a running versitygw.
type Server struct {
	Endpoint  string // http://<host>:<port>, 127.0.0.1 unless LaunchOn
	AccessKey string
	SecretKey string
	Region    string
	Dir       string // the directory behind the gateway; one subdirectory per bucket

	proc *serverproc.Proc
}

// Start runs versitygw for the duration of the test (stopped by t.Cleanup).
// It fails the test, with the gateway's output, if the server does not come up.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := launchOn(tb.TempDir(), "127.0.0.1", serverproc.Patience(tb))
	if err != nil {
		tb.Fatalf("s3server: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// Launch runs versitygw over dir outside a test (the airflow-e2e driver);
// the caller must Stop it.
func Launch(dir string) (*Server, error) { return LaunchOn(dir, "127.0.0.1") }

// LaunchOn is Launch listening on host, an address of this machine (the
// airflow-e2e Celery mode serves workers in other network namespaces from
// a bridge's).
func LaunchOn(dir, host string) (*Server, error) { return launchOn(dir, host, startTimeout) }

// launchOn waits `within` for the gateway to answer (0: no limit).
func launchOn(dir, host string, within time.Duration) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	return serverproc.Retry(func() (*Server, error) { return start(bin, dir, host, within) })
}

func start(bin, dir, host string, within time.Duration) (*Server, error) {
	addr, err := serverproc.FreePort()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	return startOn(bin, dir, net.JoinHostPort(host, port), within)
}

// startOn runs versitygw on addr (host:port).
func startOn(bin, dir, port string, within time.Duration) (*Server, error) {
	s := &Server{
		Endpoint:  "http://" + port,
		AccessKey: "AKTEST" + randomHex(6),
		SecretKey: randomHex(20),
		Region:    "us-east-1",
		Dir:       dir,
	}
	cmd := exec.Command(bin, "--port", port, "--region", s.Region, "--quiet", "posix", dir)
	// Credentials go through the environment, not argv, so they do not show
	// up in process listings.
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s.AccessKey, "ROOT_SECRET_KEY="+s.SecretKey)
	proc, err := serverproc.Start("versitygw on "+s.Endpoint, cmd, within, s.ready)
	if err != nil {
		return nil, err
	}
	s.proc = proc
	return s, nil
}

// ready succeeds once our gateway serves the endpoint: a request signed
// with this server's own random keys succeeds. Any answer would not do: the
// port is chosen before versitygw binds it, so another server (say, another
// test package's versitygw) may hold it, and its 403 to an unsigned request
// would pass for ours.
func (s *Server) ready() error {
	client := &http.Client{Timeout: time.Second}
	resp, err := client.Get(s.Endpoint + "/")
	if err != nil {
		return err
	}
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.Client().ListBuckets(ctx, &s3.ListBucketsInput{}); err != nil {
		return fmt.Errorf("the server on %s refuses this gateway's keys (%v): another server holds the port", s.Endpoint, err)
	}
	return nil
}

// Stop terminates the gateway and waits for it. Safe to call more than once.
func (s *Server) Stop() { s.proc.Stop() }

// Output is what the gateway printed so far, for diagnosing a failing test.
func (s *Server) Output() string { return s.proc.Output() }

// Connection is an aws connection with id that reaches this server, as an
// operator would create it.
func (s *Server) Connection(id string) connections.Connection {
	extra, _ := json.Marshal(map[string]string{"endpoint_url": s.Endpoint, "region_name": s.Region})
	return connections.Connection{ConnID: id, ConnType: "aws", Login: s.AccessKey, Password: s.SecretKey, Extra: string(extra)}
}

// Client is a plain aws-sdk S3 client for this server (path-style addressing),
// for tests that inspect the server directly.
func (s *Server) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       s.Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		// versitygw checks checksums it is sent, but nothing needs them here.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// CreateBucket creates a bucket and fails the test if it cannot.
func (s *Server) CreateBucket(tb testing.TB, name string) {
	tb.Helper()
	if _, err := s.Client().CreateBucket(deadline.Context(tb), &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		tb.Fatalf("s3server: creating bucket %q: %v", name, err)
	}
}

// Binary finds versitygw on PATH or in $(go env GOPATH)/bin and installs it
// with `go install` when it is in neither.
func Binary() (string, error) { return serverproc.GoBinary("versitygw", Module) }

func randomHex(n int) string { return strings.ToUpper(randhex.String(n)) }

// Keys lists every object key in bucket, sorted.
func (s *Server) Keys(tb testing.TB, bucket string) []string {
	tb.Helper()
	var out []string
	p := s3.NewListObjectsV2Paginator(s.Client(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			tb.Fatalf("s3server: listing %s: %v", bucket, err)
		}
		for _, o := range page.Contents {
			out = append(out, aws.ToString(o.Key))
		}
	}
	sort.Strings(out)
	return out
}

// PendingUploads counts the multipart uploads started in bucket and
// neither completed nor aborted.
func (s *Server) PendingUploads(tb testing.TB, bucket string) int {
	tb.Helper()
	out, err := s.Client().ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil {
		tb.Fatalf("s3server: listing multipart uploads of %s: %v", bucket, err)
	}
	return len(out.Uploads)
}
