// Package gcsserver starts a Cloud Storage emulator for tests:
// fake-gcs-server (BSD-2-Clause), built from its Go module and run as its
// own process on 127.0.0.1, so that the objects it holds in memory never
// count against the memory of the test process.
package gcsserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/testing/serverproc"
)

// Module is the fake-gcs-server version installed when none is found.
const Module = "github.com/fsouza/fake-gcs-server@v1.56.1"

// Server is a running fake-gcs-server.
type Server struct {
	Endpoint string // http://127.0.0.1:<port>, the gcs.endpoint of a connection
	Project  string
	proc     *serverproc.Proc
}

// Binary finds fake-gcs-server or installs it with go install.
func Binary() (string, error) { return serverproc.GoBinary("fake-gcs-server", Module) }

// Start runs the emulator for the duration of the test (stopped by
// t.Cleanup), or fails the test with its output.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return serverproc.StartForTest(tb, "gcsserver", Binary, start)
}

func start(bin, dir string, within time.Duration) (*Server, error) {
	addr, err := serverproc.FreePort()
	if err != nil {
		return nil, err
	}
	host, port, _ := strings.Cut(addr, ":")
	s := &Server{Endpoint: "http://" + addr, Project: "test-project"}
	// The filesystem backend keeps finished objects on disk; uploads in
	// progress stay in the emulator's memory.
	cmd := exec.Command(bin, "-scheme", "http", "-host", host, "-port", port,
		"-external-url", s.Endpoint, "-public-host", addr,
		"-backend", "filesystem", "-filesystem-root", dir, "-log-level", "warn")
	cmd.Dir = dir
	proc, err := serverproc.Start("fake-gcs-server on "+s.Endpoint, cmd, within, s.ready)
	if err != nil {
		return nil, err
	}
	s.proc = proc
	return s, nil
}

// ready succeeds once the emulator answers the JSON API: the bucket list of
// a fresh fake-gcs-server, which another kind of server would not give.
func (s *Server) ready() error {
	resp, err := (&http.Client{Timeout: time.Second}).Get(s.Endpoint + "/storage/v1/b?project=" + s.Project)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Kind string `json:"kind"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Kind != "storage#buckets" {
		return fmt.Errorf("the server on %s is not fake-gcs-server (HTTP %d)", s.Endpoint, resp.StatusCode)
	}
	return nil
}

// Stop ends the emulator. Safe to call more than once.
func (s *Server) Stop() { s.proc.Stop() }

// Output is what the emulator printed so far.
func (s *Server) Output() string { return s.proc.Output() }

// Connection is a google_cloud_platform connection with id that reaches
// this emulator: anonymous, as the emulator checks no credentials.
func (s *Server) Connection(id string) connections.Connection {
	extra, _ := json.Marshal(map[string]any{"gcs.endpoint": s.Endpoint, "is_anonymous": true, "project": s.Project})
	return connections.Connection{ConnID: id, ConnType: "google_cloud_platform", Extra: string(extra)}
}

// CreateBucket creates a bucket through the JSON API or fails the test.
func (s *Server) CreateBucket(tb testing.TB, name string) {
	tb.Helper()
	body, _ := json.Marshal(map[string]string{"name": name})
	req, _ := http.NewRequestWithContext(deadline.Context(tb), http.MethodPost, s.Endpoint+"/storage/v1/b?project="+s.Project, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("gcsserver: creating bucket %q: %v", name, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("gcsserver: creating bucket %q: HTTP %d", name, resp.StatusCode)
	}
}

// Objects lists the object names in bucket, sorted.
func (s *Server) Objects(tb testing.TB, bucket string) []string {
	tb.Helper()
	var names []string
	token := ""
	for {
		u := s.Endpoint + "/storage/v1/b/" + bucket + "/o?pageToken=" + token
		resp, err := http.Get(u)
		if err != nil {
			tb.Fatalf("gcsserver: listing %s: %v", bucket, err)
		}
		var page struct {
			Items []struct {
				Name string `json:"name"`
			} `json:"items"`
			NextPageToken string `json:"nextPageToken"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			tb.Fatalf("gcsserver: listing %s: HTTP %d (%v)", bucket, resp.StatusCode, err)
		}
		for _, it := range page.Items {
			names = append(names, it.Name)
		}
		if page.NextPageToken == "" {
			return names
		}
		token = page.NextPageToken
	}
}
