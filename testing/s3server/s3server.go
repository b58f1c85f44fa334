// Package s3server starts a real S3 server for tests: versitygw (Apache-2.0)
// serving a temporary directory through its posix backend on 127.0.0.1.
//
// Tests use it instead of mocks so that multipart uploads, server-side copies
// and error codes behave as a real S3 endpoint does.
package s3server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
)

// Module is the versitygw version the helper installs when none is found.
const Module = "github.com/versity/versitygw/cmd/versitygw@v1.8.0"

// startTimeout bounds how long we wait for the gateway to answer.
const startTimeout = 30 * time.Second

// Server is a running versitygw.
type Server struct {
	Endpoint  string // http://127.0.0.1:<port>
	AccessKey string
	SecretKey string
	Region    string
	Dir       string // the directory behind the gateway; one subdirectory per bucket

	cmd      *exec.Cmd
	exited   chan struct{}
	output   *lockedBuffer
	stopOnce sync.Once
}

// Start runs versitygw for the duration of the test (stopped by t.Cleanup).
// It fails the test, with the gateway's output, if the server does not come up.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := Launch(tb.TempDir())
	if err != nil {
		tb.Fatalf("s3server: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// Launch runs versitygw over dir outside a test (the airflow-e2e driver);
// the caller must Stop it.
func Launch(dir string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	var lastErr error
	// The free port is chosen before versitygw binds it, so another process
	// can take it in between; a couple of attempts make that race harmless.
	for attempt := 0; attempt < 3; attempt++ {
		s, err := start(bin, dir)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func start(bin, dir string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	return startOn(bin, dir, port)
}

// startOn runs versitygw on addr (127.0.0.1:port).
func startOn(bin, dir, port string) (*Server, error) {
	s := &Server{
		Endpoint:  "http://" + port,
		AccessKey: "AKTEST" + randomHex(6),
		SecretKey: randomHex(20),
		Region:    "us-east-1",
		Dir:       dir,
		exited:    make(chan struct{}),
		output:    &lockedBuffer{},
	}
	s.cmd = exec.Command(bin, "--port", port, "--region", s.Region, "--quiet", "posix", dir)
	// Credentials go through the environment, not argv, so they do not show
	// up in process listings.
	s.cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s.AccessKey, "ROOT_SECRET_KEY="+s.SecretKey)
	s.cmd.Stdout = s.output
	s.cmd.Stderr = s.output
	// Own process group, so the whole gateway goes away on Stop.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	if err := s.waitReady(startTimeout); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// waitReady polls the endpoint until our gateway serves it: a request
// signed with this server's own random keys succeeds. Any answer would not
// do: the port is chosen before versitygw binds it, so another server
// (say, another test package's versitygw) may hold it, and its 403 to an
// unsigned request would pass for ours.
func (s *Server) waitReady(timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := client.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = s.Client().ListBuckets(ctx, &s3.ListBucketsInput{})
			cancel()
			if err == nil {
				return nil
			}
			err = fmt.Errorf("the server on %s refuses this gateway's keys (%v): another server holds the port", s.Endpoint, err)
		}
		select {
		case <-s.exited:
			return fmt.Errorf("versitygw exited before serving on %s; its output:\n%s", s.Endpoint, s.output.String())
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw did not answer on %s within %s (last error: %v); its output:\n%s", s.Endpoint, timeout, err, s.output.String())
		}
	}
}

// Stop terminates the gateway and waits for it. Safe to call more than once.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		if s.cmd.Process == nil {
			return
		}
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.exited
		}
	})
}

// Output is what the gateway printed so far, for diagnosing a failing test.
func (s *Server) Output() string { return s.output.String() }

// AWS is the aws connection settings that reach this server.
func (s *Server) AWS() connections.AWSConfig {
	return connections.AWSConfig{AccessKeyID: s.AccessKey, SecretAccessKey: s.SecretKey, Region: s.Region, EndpointURL: s.Endpoint}
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		tb.Fatalf("s3server: creating bucket %q: %v", name, err)
	}
}

// Binary finds versitygw on PATH or in $(go env GOPATH)/bin and installs it
// with `go install` when it is in neither.
func Binary() (string, error) {
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	gobin, err := goBinDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(gobin, "versitygw")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	installMu.Lock()
	defer installMu.Unlock()
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	out, err := exec.Command("go", "install", Module).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("versitygw is not installed and `go install %s` failed: %v\n%s\ninstall it by hand with that command", Module, err, out)
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("`go install %s` succeeded but %s is missing: %v", Module, p, err)
	}
	return p, nil
}

var installMu sync.Mutex

func goBinDir() (string, error) {
	out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output()
	if err != nil {
		return "", fmt.Errorf("versitygw is not on PATH and `go env` failed (%v); install it with `go install %s`", err, Module)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > 0 && strings.TrimSpace(lines[0]) != "" {
		return strings.TrimSpace(lines[0]), nil
	}
	if len(lines) < 2 || strings.TrimSpace(lines[1]) == "" {
		return "", errors.New("versitygw is not on PATH and GOPATH is empty; install it with `go install " + Module + "`")
	}
	// GOPATH may list several directories; go install uses the first.
	return filepath.Join(filepath.SplitList(strings.TrimSpace(lines[1]))[0], "bin"), nil
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port on 127.0.0.1: %w", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return strings.ToUpper(hex.EncodeToString(b))[:2*n]
}

// lockedBuffer collects the gateway's output from two pipes at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
