package fakeopensandbox_test

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/fakeopensandbox"
)

// The answers of opensandbox-server 1.1.1 on Docker that a client's
// behaviour depends on, as `make opensandbox-e2e` met them.

func TestImageNotOnTheServer(t *testing.T) {
	c := start(t, fakeopensandbox.Options{Images: []string{"python:3.12-slim"}})
	a := c.do("POST", "/v1/sandboxes", strings.NewReader(strings.Replace(validCreate, "python:3.12-slim", "agw/none:1", 1)), nil)
	if a.status != 500 || a.json(t)["code"] != "DOCKER::SANDBOX_IMAGE_PULL_FAILED" || !strings.Contains(a.json(t)["message"].(string), "Failed to pull image agw/none:1") {
		t.Fatalf("create with an image the server has not got: %d %s", a.status, a.body)
	}
	if n := len(c.srv.Sandboxes()); n != 0 {
		t.Fatalf("%d sandboxes after a refused create", n)
	}
	a = c.do("POST", "/v1/sandboxes", strings.NewReader(validCreate), nil)
	if a.status != 202 {
		t.Fatalf("create with an image it has: %d %s", a.status, a.body)
	}
	if _, ok := a.json(t)["image"]; ok {
		t.Fatalf("the create answer names the image, the real one does not: %s", a.body)
	}
}

func TestLifetimeCap(t *testing.T) {
	c := start(t, fakeopensandbox.Options{MaxTimeout: time.Hour})
	a := c.do("POST", "/v1/sandboxes", strings.NewReader(strings.Replace(validCreate, `"timeout":60`, `"timeout":7200`, 1)), nil)
	if a.status != 400 || a.json(t)["code"] != "SANDBOX::INVALID_PARAMETER" || a.json(t)["message"] != "Sandbox timeout 7200s exceeds configured maximum of 3600s." {
		t.Fatalf("a timeout over the cap: %d %s", a.status, a.body)
	}
	c.create(strings.Replace(validCreate, `"timeout":60`, `"timeout":3600`, 1))
}

func TestBodyNotJSON(t *testing.T) {
	c := start(t, fakeopensandbox.Options{})
	a := c.do("POST", "/v1/sandboxes", strings.NewReader(`{"image":`), nil)
	d, _ := a.json(t)["detail"].([]any)
	if a.status != 422 || len(d) != 1 || d[0].(map[string]any)["type"] != "json_invalid" {
		t.Fatalf("a body that is not JSON: %d %s", a.status, a.body)
	}
}

// Both proxy routes reach execd; a port out of range is the server's 400;
// the sandbox's own endpoint stops listening when it is deleted.
func TestEndpointShapes(t *testing.T) {
	c := start(t, fakeopensandbox.Options{})
	id := c.create(validCreate)
	if a := c.do("GET", "/v1/sandboxes/"+id+"/endpoints/0", nil, nil); a.status != 400 || a.json(t)["code"] != "DOCKER::INVALID_PORT" {
		t.Fatalf("port 0: %d %s", a.status, a.body)
	}
	ep := c.do("GET", "/v1/sandboxes/"+id+"/endpoints/44772?use_server_proxy=true", nil, nil).json(t)
	if want := c.srv.Domain + "/v1/sandboxes/" + id + "/proxy/44772"; ep["endpoint"] != want {
		t.Fatalf("server proxy endpoint %v, want %s", ep["endpoint"], want)
	}
	anon := client{t: t, srv: c.srv}
	for _, p := range []string{"/v1/sandboxes/" + id + "/proxy/44772/ping", "/sandboxes/" + id + "/proxy/44772/ping"} {
		if a := anon.do("GET", p, nil, nil); a.status != 200 {
			t.Fatalf("%s without an API key: %d %s", p, a.status, a.body)
		}
	}
	direct := c.do("GET", "/v1/sandboxes/"+id+"/endpoints/44772", nil, nil).json(t)["endpoint"].(string)
	addr, _, _ := strings.Cut(direct, "/")
	if a := c.do("GET", "http://"+direct+"/ping", nil, nil); a.status != 200 {
		t.Fatalf("direct ping: %d", a.status)
	}
	if a := c.do("DELETE", "/v1/sandboxes/"+id, nil, nil); a.status != 204 {
		t.Fatalf("delete: %d", a.status)
	}
	if conn, err := net.Dial("tcp", addr); err == nil {
		conn.Close()
		t.Fatalf("the deleted sandbox's endpoint %s still listens", addr)
	}
}

func TestCreateLatency(t *testing.T) {
	c := start(t, fakeopensandbox.Options{CreateLatency: 300 * time.Millisecond})
	t0 := time.Now()
	id := c.create(validCreate)
	if took := time.Since(t0); took < 300*time.Millisecond {
		t.Fatalf("create answered after %v, before its latency", took)
	}
	if st := c.do("GET", "/v1/sandboxes/"+id, nil, nil).json(t)["status"].(map[string]any)["state"]; st != "Running" {
		t.Fatalf("state after create: %v", st)
	}
}

// On a container's overlay file system execd cannot size a directory, and
// a download of one is a 500.
func TestDirectoryDownloadOnOverlay(t *testing.T) {
	for _, overlay := range []bool{false, true} {
		c := start(t, fakeopensandbox.Options{Version: fakeopensandbox.VersionMain, OverlayFS: overlay})
		id := c.create(validCreate)
		base := "/v1/sandboxes/" + id + "/proxy/44772"
		if a := c.do("GET", base+"/files/download?path=/workspace", nil, nil); overlay && (a.status != http.StatusInternalServerError || strings.TrimSpace(string(a.body)) != "seeker can't seek") {
			t.Fatalf("directory download on overlayfs: %d %q", a.status, a.body)
		} else if !overlay && a.status != http.StatusOK && a.status != 0 {
			t.Fatalf("directory download elsewhere: %d %q", a.status, a.body)
		}
	}
}
