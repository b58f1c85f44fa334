package opensandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	osdk "github.com/alibaba/OpenSandbox/sdks/sandbox/go"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

func configFor(domain string) Config {
	return Config{Domain: domain, Protocol: "http", APIKey: "sk-test-secret", RequestTimeout: 5 * time.Second, UseServerProxy: true}
}

// testDriver is a driver whose lifecycle server is srvURL.
func testDriver(t *testing.T, srvURL string) *Driver {
	t.Helper()
	d, err := New(Options{Config: configFor(strings.TrimPrefix(srvURL, "http://"))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// execdAt is an execd client of d for the execd at u.
func execdAt(d *Driver, u string, headers map[string]string) *execd {
	return d.newExecd(u, headers)
}

func sandboxIsRefused(err error) bool {
	return errors.Is(err, sandbox.ErrRefused) && sandbox.IsFinal(err)
}

// serve starts a test server answering with h.
func serve(t *testing.T, h http.HandlerFunc) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func TestAPIErrorShapes(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		body      string
		wantMsg   string
		wantCode  string
		retryable bool
	}{
		{"lifecycle code/message", 404, `{"code":"DOCKER::SANDBOX_NOT_FOUND","message":"Sandbox x not found."}`, "Sandbox x not found.", "DOCKER::SANDBOX_NOT_FOUND", false},
		{"fastapi 422 detail list", 422, `{"detail":[{"loc":["body","timeout"],"msg":"Input should be greater than or equal to 60","type":"greater_than_equal"}]}`, "body.timeout: Input should be greater than or equal to 60", "", false},
		{"fastapi detail string", 404, `{"detail":"Not Found"}`, "Not Found", "", false},
		{"lifecycle 401", 401, `{"code":"INVALID_API_KEY","message":"Authentication credentials are invalid."}`, "check the API key", "INVALID_API_KEY", false},
		{"execd 401", 401, `{"error":"Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"}`, "X-EXECD-ACCESS-TOKEN", "", false},
		{"proxy 502 text", 502, "Bad Gateway", "Bad Gateway", "", true},
		{"empty 404", 404, "", "Not Found", "", false},
		{"500", 500, `{"code":"GENERAL::UNKNOWN_ERROR","message":"boom"}`, "retry later", "GENERAL::UNKNOWN_ERROR", true},
		{"503 html", 503, "<html>unavailable</html>", "<html>unavailable</html>", "", true},
		{"408", 408, "", "Request Timeout", "", true},
		{"429", 429, `{"code":"RATE","message":"slow down"}`, "slow down", "RATE", true},
		{"409", 409, `{"code":"DOCKER::SANDBOX_NOT_RUNNING","message":"paused"}`, "not in a state", "DOCKER::SANDBOX_NOT_RUNNING", false},
		{"400", 400, `{"code":"SANDBOX::INVALID_PARAMETER","message":"timeout over the cap"}`, "fix the sandbox spec", "SANDBOX::INVALID_PARAMETER", false},
		{"execd deterministic 500", 500, `{"code":"RUNTIME_ERROR","message":"path is a directory: /w/d"}`, "retrying will not fix", "RUNTIME_ERROR", false},
		{"execd transient 500", 500, `{"code":"RUNTIME_ERROR","message":"open /w/f: too many open files"}`, "retry later", "RUNTIME_ERROR", true},
		{"501", 501, `{"code":"SNAPSHOT::NOT_IMPLEMENTED","message":"no snapshots"}`, "no snapshots", "SNAPSHOT::NOT_IMPLEMENTED", false},
		{"gin 404", 404, "404 page not found", "404 page not found", "", false},
		// The lifecycle server's own answers (opensandbox-server 1.1.1 on Docker).
		{"image not on the server", 500, `{"code":"DOCKER::SANDBOX_IMAGE_PULL_FAILED","message":"Failed to pull image agw/none:1: 404 Client Error: pull access denied"}`, "the image is not on the OpenSandbox server", "DOCKER::SANDBOX_IMAGE_PULL_FAILED", false},
		{"pull rate-limited", 500, `{"code":"DOCKER::SANDBOX_IMAGE_PULL_FAILED","message":"Failed to pull image python:3.12: toomanyrequests: You have reached your pull rate limit"}`, "rate limit", "DOCKER::SANDBOX_IMAGE_PULL_FAILED", true},
		{"lifetime over the server's cap", 400, `{"code":"SANDBOX::INVALID_PARAMETER","message":"Sandbox timeout 7200s exceeds configured maximum of 3600s."}`, "max_sandbox_timeout_seconds", "SANDBOX::INVALID_PARAMETER", false},
		{"execd image without execd", 500, `{"code":"DOCKER::SANDBOX_EXECD_DISTRIBUTION_FAILED","message":"Failed to read execd artifacts: Could not find the file /execd in container"}`, "its operator must fix", "DOCKER::SANDBOX_EXECD_DISTRIBUTION_FAILED", false},
		{"container start failed", 500, `{"code":"DOCKER::SANDBOX_START_FAILED","message":"Egress sidecar container failed to start."}`, "retry later", "DOCKER::SANDBOX_START_FAILED", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Request-ID", "req-1")
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			_, err := testDriver(t, srv.URL).getSandbox(context.Background(), "sbx1")
			var api *APIError
			if !errors.As(err, &api) {
				t.Fatalf("err %T %v", err, err)
			}
			var se *osdk.APIError
			if !errors.As(err, &se) || se.StatusCode != tt.status {
				t.Fatalf("the SDK's error is not reachable: %v", err)
			}
			msg := err.Error()
			if api.Status != tt.status || api.Code != tt.wantCode || !strings.Contains(msg, tt.wantMsg) {
				t.Fatalf("got %+v: %s", api, msg)
			}
			if !strings.Contains(msg, "could not get sandbox sbx1") || !strings.Contains(msg, "req-1") {
				t.Fatalf("message does not say which call failed: %s", msg)
			}
			if strings.Contains(msg, "sk-test-secret") {
				t.Fatalf("message leaks the key: %s", msg)
			}
			if got := sandbox.IsRetryable(classify(err)); got != tt.retryable {
				t.Fatalf("retryable = %v, want %v", got, tt.retryable)
			}
			if sandbox.IsFinal(err) == tt.retryable {
				t.Fatalf("final = %v for an answer whose retryable = %v", sandbox.IsFinal(err), tt.retryable)
			}
		})
	}
}

func TestTransportErrorsAreRetryable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	d := testDriver(t, "http://"+addr)
	_, err = d.getSandbox(context.Background(), "x")
	if err == nil || !sandbox.IsRetryable(classify(err)) || !strings.Contains(err.Error(), "reachable") {
		t.Fatalf("err = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = d.getSandbox(ctx, "x")
	if err == nil || sandbox.IsRetryable(classify(err)) {
		t.Fatalf("a cancelled call must stay terminal: %v", err)
	}
}

// List sends the metadata filter encoded twice, as the server parses it as
// its own query string, and reads every page.
func TestListEncodesMetadataAndPages(t *testing.T) {
	var rawQueries []string
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("OPEN-SANDBOX-API-KEY") != "sk-test-secret" {
			t.Errorf("missing API key header")
		}
		rawQueries = append(rawQueries, r.URL.RawQuery)
		page := r.URL.Query().Get("page")
		n := 0
		fmt.Sscan(page, &n)
		json.NewEncoder(w).Encode(map[string]any{
			"items":      []map[string]any{{"id": "sbx" + page, "status": map[string]string{"state": "Running"}, "createdAt": time.Now()}},
			"pagination": map[string]any{"page": n, "pageSize": 1, "totalItems": 3, "totalPages": 3, "hasNextPage": n < 3},
		})
	})
	recs, err := testDriver(t, srv.URL).listSandboxes(context.Background(), map[string]string{"airflow_owner": "b32.1.x", "team": "a&b=c"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[2].ID != "sbx3" {
		t.Fatalf("records %+v", recs)
	}
	q, _ := url.ParseQuery(rawQueries[0])
	inner, err := url.ParseQuery(q.Get("metadata"))
	if err != nil || inner.Get("team") != "a&b=c" || inner.Get("airflow_owner") != "b32.1.x" {
		t.Fatalf("metadata param %q decodes to %v (%v)", q.Get("metadata"), inner, err)
	}
	if !strings.Contains(rawQueries[0], "metadata=airflow_owner%3Db32.1.x%26team%3Da%2526b%253Dc") {
		t.Fatalf("metadata is not double-encoded: %s", rawQueries[0])
	}
	if q.Get("pageSize") != "200" || q.Get("page") != "1" {
		t.Fatalf("paging params %v", q)
	}
}

// The endpoint the server gives gets the connection's protocol when it
// has no scheme, and the server's host when it is an unspecified address.
func TestEndpointURL(t *testing.T) {
	cases := map[string]string{
		"10.0.0.1:40001/proxy/44772":          "http://10.0.0.1:40001/proxy/44772",
		"os.example/sandboxes/x/proxy/44772/": "http://os.example/sandboxes/x/proxy/44772",
		"https://gw.example/x/44772":          "https://gw.example/x/44772",
		"sbx-44772.sandboxes.example.com":     "http://sbx-44772.sandboxes.example.com",
		"0.0.0.0:9/sandboxes/x/proxy/44772":   "", // the server's own host:port, filled in below
	}
	var answer string
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/sandboxes/sbx1/endpoints/44772" || r.URL.Query().Get("use_server_proxy") != "true" {
			t.Errorf("endpoint lookup %s", r.URL)
		}
		json.NewEncoder(w).Encode(map[string]any{"endpoint": answer, "headers": map[string]string{"X-Token": "t"}})
	})
	d := testDriver(t, srv.URL)
	for in, want := range cases {
		if want == "" {
			want = srv.URL + "/sandboxes/x/proxy/44772"
		}
		answer = in
		got, hdr, err := d.endpoint(context.Background(), "sbx1", ExecdPort)
		if err != nil || got != want || hdr["X-Token"] != "t" {
			t.Errorf("%s: got %s %v (%v) want %s", in, got, hdr, err, want)
		}
	}
}

func TestEnforces(t *testing.T) {
	pol := func(mode, def string, rules ...osdk.NetworkRule) *osdk.PolicyStatusResponse {
		return &osdk.PolicyStatusResponse{Mode: mode, Policy: &osdk.NetworkPolicy{DefaultAction: def, Egress: rules}}
	}
	allow := func(h string) osdk.NetworkRule { return osdk.NetworkRule{Action: "allow", Target: h} }
	cases := []struct {
		name  string
		got   *osdk.PolicyStatusResponse
		hosts []string
		ok    bool
	}{
		{"deny all", pol("deny_all", "deny"), nil, true},
		{"missing default reads as deny", pol("enforcing", "", allow("pypi.org")), []string{"pypi.org"}, true},
		{"case and order ignored", pol("enforcing", "deny", allow("B.org"), allow("a.org")), []string{"a.org", "b.org"}, true},
		{"allow all", pol("allow_all", "allow"), nil, false},
		{"default allow", pol("enforcing", "allow"), nil, false},
		{"extra host", pol("enforcing", "deny", allow("a.org"), allow("evil.org")), []string{"a.org"}, false},
		{"missing host", pol("enforcing", "deny"), []string{"a.org"}, false},
		{"deny rules do not count as allowed", pol("enforcing", "deny", osdk.NetworkRule{Action: "deny", Target: "a.org"}), nil, true},
		{"no mode", pol("", "deny"), nil, false},
		{"unknown mode", pol("learning", "deny"), nil, false},
		{"deny all but hosts wanted", pol("deny_all", "deny"), []string{"a.org"}, false},
		{"no policy reads as deny", &osdk.PolicyStatusResponse{Mode: "deny_all"}, nil, true},
	}
	for _, c := range cases {
		if ok, why := enforces(c.got, c.hosts); ok != c.ok {
			t.Errorf("%s: ok=%v (%s)", c.name, ok, why)
		}
	}
}

// Uploads are multipart: a metadata part with a filename (execd requires
// one) carrying the mode as octal digits, then the file part.
func TestUploadMultipartShape(t *testing.T) {
	var seen []string
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Endpoint") != "yes" {
			t.Errorf("endpoint header not forwarded")
		}
		mr, err := r.MultipartReader()
		if err != nil {
			t.Fatal(err)
		}
		for {
			p, err := mr.NextPart()
			if err != nil {
				break
			}
			b, _ := io.ReadAll(p)
			seen = append(seen, fmt.Sprintf("%s|%s|%s|%s", p.FormName(), p.FileName(), p.Header.Get("Content-Type"), b))
		}
	})
	ex := execdAt(testDriver(t, srv.URL), srv.URL, map[string]string{"X-Endpoint": "yes"})
	if err := ex.upload(context.Background(), "/w/f.sh", strings.NewReader("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	want := []string{`metadata|metadata|application/json|{"path":"/w/f.sh","mode":755}`, "file|file|application/octet-stream|#!/bin/sh\n"}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Fatalf("parts\n%s\nwant\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}

// A reader that fails mid-upload fails the upload, naming the cause.
func TestUploadSourceError(t *testing.T) {
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) })
	ex := execdAt(testDriver(t, srv.URL), srv.URL, nil)
	src := io.MultiReader(strings.NewReader("part"), iotestErrReader{})
	err := ex.upload(context.Background(), "/f", src, 0o644)
	if err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("err = %v", err)
	}
}

type iotestErrReader struct{}

func (iotestErrReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestEndpointWithReachableHost(t *testing.T) {
	cases := []struct {
		ep    string
		proxy bool
		want  string
	}{
		{"0.0.0.0:8080/sandboxes/x/proxy/44772", true, "os.example:8080/sandboxes/x/proxy/44772"},
		{"0.0.0.0:40123/proxy/44772", false, "os.example:40123/proxy/44772"},
		{"[::]:40123", false, "os.example:40123"},
		{"10.1.2.3:40123/proxy/44772", false, "10.1.2.3:40123/proxy/44772"},
		{"sbx-44772.example.com", false, "sbx-44772.example.com"},
		{"http://0.0.0.0:9/p", true, "http://os.example:8080/p"},
	}
	for _, c := range cases {
		if got := reachableHost(c.ep, "os.example:8080", c.proxy); got != c.want {
			t.Errorf("%s (proxy %v): got %s want %s", c.ep, c.proxy, got, c.want)
		}
	}
}

// hold answers with status and headers, then sends nothing and keeps the
// connection open until the client leaves: execd's body-less answers.
func hold(t *testing.T, status int, hdr map[string]string) *httptest.Server {
	return serve(t, func(w http.ResponseWriter, r *http.Request) {
		for k, v := range hdr {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
}

// bounded fails the test if fn has not returned near the test binary's
// deadline: a call the server holds forever must give up by itself.
func bounded(t *testing.T, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	deadline.Wait(t, "the call to give up on the held answer", done)
}

// Answers whose Content-Length promises a body that never comes must not
// hang a download or an error report (guard.go).
func TestBodylessAnswers(t *testing.T) {
	t.Run("directory", func(t *testing.T) {
		srv := hold(t, 200, map[string]string{"Content-Length": "9223372036854775807"})
		ex := execdAt(testDriver(t, srv.URL), srv.URL, nil)
		bounded(t, func() {
			if _, err := ex.download(context.Background(), "/w/d", -1); !errors.Is(err, sandbox.ErrIsDir) {
				t.Errorf("want ErrIsDir, got %v", err)
			}
		})
	})
	t.Run("download error without its body", func(t *testing.T) {
		srv := hold(t, 500, map[string]string{"Content-Length": "10"})
		ex := execdAt(testDriver(t, srv.URL), srv.URL, nil)
		bounded(t, func() {
			var api *APIError
			if _, err := ex.download(context.Background(), "/w/f", 5); !errors.As(err, &api) || api.Status != 500 {
				t.Errorf("want a 500 APIError, got %v", err)
			}
		})
	})
	t.Run("empty file as older builds answer", func(t *testing.T) {
		srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Range") != "bytes=0-4" {
				t.Errorf("range %q", r.Header.Get("Range"))
			}
			w.Header().Set("Content-Range", "bytes */0")
			w.WriteHeader(416)
		})
		ex := execdAt(testDriver(t, srv.URL), srv.URL, nil)
		rc, err := ex.download(context.Background(), "/w/empty", 5)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := io.ReadAll(rc); len(b) != 0 {
			t.Errorf("body %q", b)
		}
	})
	t.Run("lifecycle error without its body", func(t *testing.T) {
		srv := hold(t, 500, map[string]string{"Content-Length": "100"})
		d := testDriver(t, srv.URL)
		bounded(t, func() {
			var api *APIError
			if _, err := d.getSandbox(context.Background(), "x"); !errors.As(err, &api) || api.Status != 500 {
				t.Errorf("want a 500 APIError, got %v", err)
			}
		})
	})
}

// The stall guard counts only time spent waiting in Read: a slow reader
// is not a stalled server.
func TestStallGuard(t *testing.T) {
	pr, pw := io.Pipe()
	g := newStallGuard(pr, 50*time.Millisecond)
	go func() {
		pw.Write([]byte("a"))
		pw.Write([]byte("b"))
	}()
	buf := make([]byte, 1)
	if _, err := g.Read(buf); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond) // the consumer is slow, not the server
	if _, err := g.Read(buf); err != nil || buf[0] != 'b' {
		t.Fatalf("a slow consumer was taken for a stall: %q %v", buf, err)
	}
	_, err := g.Read(buf) // nothing more comes
	var se *StallError
	if !errors.As(err, &se) {
		t.Fatalf("want a StallError, got %v", err)
	}
	g.Close()
}

// execd on a container's overlay file system answers a download of a
// directory with 500 "seeker can't seek" (opensandbox-server on Docker):
// that is ErrIsDir, final; any other 500 body stays the error it says.
func TestDirectoryDownloadSeekError(t *testing.T) {
	body := "seeker can't seek\n"
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, strings.TrimSuffix(body, "\n"), http.StatusInternalServerError)
	})
	d := testDriver(t, srv.URL)
	x := execdAt(d, srv.URL, nil)
	if _, err := x.download(context.Background(), "/workspace", 0); !errors.Is(err, sandbox.ErrIsDir) {
		t.Fatalf("download of a directory: %v", err)
	}
	body = "disk on fire\n"
	_, err := x.download(context.Background(), "/workspace/f", 0)
	var api *APIError
	if !errors.As(err, &api) || api.Status != 500 || !strings.Contains(err.Error(), "disk on fire") || errors.Is(err, sandbox.ErrIsDir) {
		t.Fatalf("another 500: %v", err)
	}
}
