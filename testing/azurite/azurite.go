// Package azurite starts Microsoft's Azure Storage emulator (npm package
// azurite, MIT) for tests: its blob service on 127.0.0.1, as its own
// process, with a storage account whose key is random per server, and
// telemetry off (nothing leaves the machine).
package azurite

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/testing/serverproc"
)

// Package is the azurite version installed (npm install -g) when none is
// found.
const Package = "azurite@3.37.0"

// Server is a running Azurite blob service.
type Server struct {
	Account    string
	Key        string // base64 shared key
	AccountURL string // http://127.0.0.1:<port>/<account>
	proc       *serverproc.Proc
}

// Binary finds azurite-blob or installs azurite with npm.
func Binary() (string, error) { return serverproc.NpmBinary("azurite-blob", Package) }

// Start runs Azurite for the duration of the test (stopped by t.Cleanup),
// or fails the test with its output.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return serverproc.StartForTest(tb, "azurite", Binary, start)
}

func start(bin, dir string, within time.Duration) (*Server, error) {
	addr, err := serverproc.FreePort()
	if err != nil {
		return nil, err
	}
	host, port, _ := strings.Cut(addr, ":")
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	name := make([]byte, 4)
	_, _ = rand.Read(name)
	s := &Server{Account: "acct" + hex.EncodeToString(name), Key: base64.StdEncoding.EncodeToString(key)}
	s.AccountURL = "http://" + addr + "/" + s.Account
	cmd := exec.Command(bin, "--blobHost", host, "--blobPort", port, "--location", dir,
		"--silent", "--disableTelemetry", "--skipApiVersionCheck", "--loose", "--disableProductStyleUrl")
	cmd.Dir = dir
	// The account and its key go through the environment, not argv.
	cmd.Env = append(os.Environ(), "AZURITE_ACCOUNTS="+s.Account+":"+s.Key)
	proc, err := serverproc.Start("azurite on "+addr, cmd, within, s.ready)
	if err != nil {
		return nil, err
	}
	s.proc = proc
	return s, nil
}

// ready succeeds once a request signed with this server's own key is
// served, which no other server on the port would do.
func (s *Server) ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	pager := s.client().NewListContainersPager(nil)
	_, err := pager.NextPage(ctx)
	return err
}

// Stop ends Azurite. Safe to call more than once.
func (s *Server) Stop() { s.proc.Stop() }

// Output is what Azurite printed so far.
func (s *Server) Output() string { return s.proc.Output() }

// Connection is a wasb connection with id that reaches this server
// (account URL, name and key).
func (s *Server) Connection(id string) connections.Connection {
	return connections.Connection{ConnID: id, ConnType: "wasb", Host: s.AccountURL, Login: s.Account, Password: s.Key}
}

// ConnectionString is this server's Azure connection string.
func (s *Server) ConnectionString() string {
	return fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;BlobEndpoint=%s;", s.Account, s.Key, s.AccountURL)
}

func (s *Server) client() *azblob.Client {
	cred, err := azblob.NewSharedKeyCredential(s.Account, s.Key)
	if err != nil {
		panic(err) // the key is ours and valid base64
	}
	c, err := azblob.NewClientWithSharedKeyCredential(s.AccountURL, cred, nil)
	if err != nil {
		panic(err)
	}
	return c
}

// CreateContainer creates a container or fails the test.
func (s *Server) CreateContainer(tb testing.TB, name string) {
	tb.Helper()
	if _, err := s.client().CreateContainer(deadline.Context(tb), name, nil); err != nil {
		tb.Fatalf("azurite: creating container %q: %v", name, err)
	}
}

// Blobs lists the committed blobs in a container, sorted.
func (s *Server) Blobs(tb testing.TB, containerName string) []string {
	return s.list(tb, containerName, false)
}

// Uncommitted lists the blobs that have only uncommitted blocks: uploads
// staged but never committed.
func (s *Server) Uncommitted(tb testing.TB, containerName string) []string {
	all := s.list(tb, containerName, true)
	committed := map[string]bool{}
	for _, b := range s.list(tb, containerName, false) {
		committed[b] = true
	}
	var out []string
	for _, b := range all {
		if !committed[b] {
			out = append(out, b)
		}
	}
	return out
}

func (s *Server) list(tb testing.TB, containerName string, uncommitted bool) []string {
	tb.Helper()
	var names []string
	pager := s.client().NewListBlobsFlatPager(containerName, &container.ListBlobsFlatOptions{
		Include: container.ListBlobsInclude{UncommittedBlobs: uncommitted},
	})
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			tb.Fatalf("azurite: listing %s: %v", containerName, err)
		}
		for _, b := range page.Segment.BlobItems {
			names = append(names, *b.Name)
		}
	}
	sort.Strings(names)
	return names
}
