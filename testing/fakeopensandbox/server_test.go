package fakeopensandbox_test

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/eventually"
	"github.com/airflow-sandbox/airflow-go-worker/testing/fakeopensandbox"
)

type client struct {
	t   *testing.T
	srv *fakeopensandbox.Server
	key string
}

type answer struct {
	status int
	body   []byte
	header http.Header
}

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", a.body, err)
	}
	return m
}

func (c client) do(method, path string, body io.Reader, hdr map[string]string) answer {
	c.t.Helper()
	u := path
	if !strings.HasPrefix(path, "http") {
		u = c.srv.URL + path
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.key != "" {
		req.Header.Set(fakeopensandbox.APIKeyHeader, c.key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, b, resp.Header}
}

func (c client) create(body string) string {
	c.t.Helper()
	a := c.do("POST", "/v1/sandboxes", strings.NewReader(body), map[string]string{"Content-Type": "application/json"})
	if a.status != 202 {
		c.t.Fatalf("create: %d %s", a.status, a.body)
	}
	return a.json(c.t)["id"].(string)
}

const validCreate = `{"image":{"uri":"python:3.12-slim"},"entrypoint":["tail","-f","/dev/null"],"timeout":60,"resourceLimits":{"cpu":"1","memory":"2Gi"},"metadata":{"team":"data","owner":"b32.1.abc"}}`

func start(t *testing.T, opts fakeopensandbox.Options) client {
	srv := fakeopensandbox.Start(t, opts)
	return client{t: t, srv: srv, key: srv.APIKey}
}

func TestAuth(t *testing.T) {
	c := start(t, fakeopensandbox.Options{})
	if a := c.do("GET", "/health", nil, nil); a.status != 200 {
		t.Fatalf("health %d", a.status)
	}
	anon := client{t: t, srv: c.srv}
	if a := anon.do("GET", "/v1/sandboxes", nil, nil); a.status != 401 || a.json(t)["code"] != "MISSING_API_KEY" {
		t.Fatalf("no key: %d %s", a.status, a.body)
	}
	wrong := client{t: t, srv: c.srv, key: "nope"}
	if a := wrong.do("GET", "/v1/sandboxes", nil, nil); a.status != 401 || a.json(t)["code"] != "INVALID_API_KEY" {
		t.Fatalf("wrong key: %d %s", a.status, a.body)
	}
	if a := c.do("GET", "/v1/sandboxes", nil, nil); a.status != 200 || a.header.Get("X-Request-ID") == "" {
		t.Fatalf("right key: %d %s", a.status, a.body)
	}
}

func TestCreateValidation(t *testing.T) {
	c := start(t, fakeopensandbox.Options{})
	cases := []struct {
		body   string
		status int
		want   string
	}{
		{`{`, 422, "detail"},
		{`{"entrypoint":["x"],"resourceLimits":{}}`, 422, "image"},
		{`{"image":{"uri":"i"},"resourceLimits":{}}`, 422, "entrypoint"},
		{`{"image":{"uri":"i"},"entrypoint":["x"]}`, 422, "resourceLimits"},
		{`{"image":{"uri":"i"},"entrypoint":["x"],"resourceLimits":{},"timeout":59}`, 422, "greater than or equal to 60"},
		{`{"image":{"uri":"i"},"entrypoint":["x"],"resourceLimits":{},"metadata":{"owner":"dag/run"}}`, 400, "SANDBOX::INVALID_METADATA_LABEL"},
		{`{"image":{"uri":"i"},"entrypoint":["x"],"resourceLimits":{},"metadata":{"opensandbox.io/x":"v"}}`, 400, "reserved prefix"},
		{`{"image":{"uri":"i"},"entrypoint":["x"],"resourceLimits":{},"networkPolicy":{"defaultAction":"maybe"}}`, 422, "defaultAction"},
	}
	for _, tc := range cases {
		a := c.do("POST", "/v1/sandboxes", strings.NewReader(tc.body), nil)
		if a.status != tc.status || !strings.Contains(string(a.body), tc.want) {
			t.Errorf("%s: %d %s", tc.body, a.status, a.body)
		}
	}
	if n := len(c.srv.Sandboxes()); n != 0 {
		t.Fatalf("invalid creates left %d sandboxes", n)
	}
}

func TestLifecycle(t *testing.T) {
	c := start(t, fakeopensandbox.Options{PendingFor: time.Hour})
	id := c.create(validCreate)
	a := c.do("GET", "/v1/sandboxes/"+id, nil, nil)
	m := a.json(t)
	if m["status"].(map[string]any)["state"] != "Pending" || m["expiresAt"] == nil || m["image"].(map[string]any)["uri"] != "python:3.12-slim" {
		t.Fatalf("get: %s", a.body)
	}
	// Nothing listens inside a sandbox that is not running yet.
	ep := c.do("GET", "/v1/sandboxes/"+id+"/endpoints/44772?use_server_proxy=true", nil, nil).json(t)["endpoint"].(string)
	if strings.Contains(ep, "://") || !strings.HasSuffix(ep, "/sandboxes/"+id+"/proxy/44772") {
		t.Fatalf("endpoint %q", ep)
	}
	if a := c.do("GET", "http://"+ep+"/ping", nil, nil); a.status != 502 {
		t.Fatalf("ping while pending: %d", a.status)
	}
	c.srv.SetPendingFor(0)
	id2 := c.create(validCreate)
	if a := c.do("GET", "http://"+strings.Replace(ep, id, id2, 1)+"/ping", nil, nil); a.status != 200 {
		t.Fatalf("ping when running: %d", a.status)
	}

	// Filters: state, and the metadata query string encoded inside the query.
	list := func(q url.Values) map[string]any {
		return c.do("GET", "/v1/sandboxes?"+q.Encode(), nil, nil).json(t)
	}
	if items := list(url.Values{"state": {"Running"}})["items"].([]any); len(items) != 1 || items[0].(map[string]any)["id"] != id2 {
		t.Fatalf("running: %v", items)
	}
	inner := url.Values{"team": {"data"}, "owner": {"b32.1.abc"}}.Encode()
	page := list(url.Values{"metadata": {inner}, "pageSize": {"1"}, "page": {"1"}})
	if len(page["items"].([]any)) != 1 || page["pagination"].(map[string]any)["hasNextPage"] != true {
		t.Fatalf("page 1: %v", page)
	}
	page = list(url.Values{"metadata": {inner}, "pageSize": {"1"}, "page": {"2"}})
	if len(page["items"].([]any)) != 1 || page["pagination"].(map[string]any)["hasNextPage"] != false {
		t.Fatalf("page 2: %v", page)
	}
	if items := list(url.Values{"metadata": {"team=other"}})["items"].([]any); len(items) != 0 {
		t.Fatalf("filter matched %v", items)
	}
	if a := c.do("GET", "/v1/sandboxes?metadata=team", nil, nil); a.status != 400 || a.json(t)["code"] != "INVALID_METADATA_FORMAT" {
		t.Fatalf("malformed filter: %d %s", a.status, a.body)
	}

	// Metadata merge patch: set and delete.
	a = c.do("PATCH", "/v1/sandboxes/"+id+"/metadata", strings.NewReader(`{"team":null,"new":"v"}`), nil)
	meta := a.json(t)["metadata"].(map[string]any)
	if _, ok := meta["team"]; ok || meta["new"] != "v" {
		t.Fatalf("patched metadata %v", meta)
	}

	// Renew: future only.
	if a := c.do("POST", "/v1/sandboxes/"+id+"/renew-expiration", strings.NewReader(`{"expiresAt":"2000-01-01T00:00:00Z"}`), nil); a.status != 400 {
		t.Fatalf("renew into the past: %d", a.status)
	}
	future := time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)
	if a := c.do("POST", "/v1/sandboxes/"+id+"/renew-expiration", strings.NewReader(`{"expiresAt":"`+future+`"}`), nil); a.status != 200 {
		t.Fatalf("renew: %d %s", a.status, a.body)
	}

	// Delete: 204, then 404 everywhere.
	if a := c.do("DELETE", "/v1/sandboxes/"+id, nil, nil); a.status != 204 {
		t.Fatalf("delete: %d", a.status)
	}
	for _, p := range []string{"/v1/sandboxes/" + id, "/v1/sandboxes/" + id + "/endpoints/44772"} {
		if a := c.do("GET", p, nil, nil); a.status != 404 || a.json(t)["code"] != "DOCKER::SANDBOX_NOT_FOUND" {
			t.Fatalf("%s after delete: %d %s", p, a.status, a.body)
		}
	}
	if a := c.do("DELETE", "/v1/sandboxes/"+id, nil, nil); a.status != 404 {
		t.Fatalf("second delete: %d", a.status)
	}
}

// At expiry the record says Failed (the container exited) for a while,
// then the sandbox is gone, as on the real server.
func TestExpiry(t *testing.T) {
	c := start(t, fakeopensandbox.Options{Lifetime: 200 * time.Millisecond, ExpiredFor: time.Hour})
	id := c.create(validCreate)
	var rec map[string]any
	eventually.True(t, "the sandbox to expire (state Failed)", func() bool {
		rec = c.do("GET", "/v1/sandboxes/"+id, nil, nil).json(t)
		return rec["status"].(map[string]any)["state"] == "Failed"
	})
	if st := rec["status"].(map[string]any); st["reason"] != "CONTAINER_EXITED_ERROR" {
		t.Fatalf("expired sandbox's status %v", st)
	}
	if a := c.do("GET", "/v1/sandboxes/"+id+"/proxy/44772/ping", nil, nil); a.status != 502 {
		t.Fatalf("execd of an expired sandbox: %d", a.status)
	}

	c = start(t, fakeopensandbox.Options{Lifetime: 200 * time.Millisecond})
	id = c.create(validCreate)
	eventually.True(t, "the sandbox to expire (GET answering 404)", func() bool {
		return c.do("GET", "/v1/sandboxes/"+id, nil, nil).status == 404
	})
	if n := len(c.srv.Sandboxes()); n != 0 {
		t.Fatalf("%d sandboxes after expiry", n)
	}
}

func TestExecdAndEgress(t *testing.T) {
	c := start(t, fakeopensandbox.Options{Version: fakeopensandbox.VersionMain})
	id := c.create(strings.Replace(validCreate, `"metadata"`, `"networkPolicy":{"defaultAction":"deny","egress":[{"action":"allow","target":"pypi.org"}]},"metadata"`, 1))
	ep := c.do("GET", "/v1/sandboxes/"+id+"/endpoints/44772", nil, nil).json(t)
	// The sandbox's own endpoint, as the server on Docker hands it out:
	// its host port, then execd's /proxy route, no headers.
	if !regexp.MustCompile(`^127\.0\.0\.1:[0-9]+/proxy/44772$`).MatchString(ep["endpoint"].(string)) || ep["headers"] != nil {
		t.Fatalf("direct endpoint %v", ep)
	}
	base := "http://" + ep["endpoint"].(string)
	hdr := map[string]string{}
	if a := c.do("GET", base+"/ping", nil, hdr); a.status != 200 {
		t.Fatalf("ping: %d", a.status)
	}

	// Upload: the metadata part needs a filename.
	upload := func(withFilename bool) answer {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		h := textproto.MIMEHeader{}
		if withFilename {
			h.Set("Content-Disposition", `form-data; name="metadata"; filename="metadata"`)
		} else {
			h.Set("Content-Disposition", `form-data; name="metadata"`)
		}
		p, _ := mw.CreatePart(h)
		p.Write([]byte(`{"path":"/workspace/sub/f.txt","mode":640}`))
		fp, _ := mw.CreateFormFile("file", "file")
		fp.Write([]byte("0123456789"))
		mw.Close()
		h2 := map[string]string{"Content-Type": mw.FormDataContentType()}
		for k, v := range hdr {
			h2[k] = v
		}
		return c.do("POST", base+"/files/upload", &buf, h2)
	}
	if a := upload(false); a.status != 400 || a.json(t)["code"] != "INVALID_FILE_METADATA" {
		t.Fatalf("metadata without filename: %d %s", a.status, a.body)
	}
	if a := upload(true); a.status != 200 {
		t.Fatalf("upload: %d %s", a.status, a.body)
	}
	info := c.do("GET", base+"/files/info?path=/workspace/sub/f.txt", nil, hdr).json(t)["/workspace/sub/f.txt"].(map[string]any)
	if info["type"] != "file" || info["size"] != float64(10) || info["mode"] != float64(640) {
		t.Fatalf("info %v", info)
	}
	if a := c.do("GET", base+"/files/info?path=/workspace/nope", nil, hdr); a.status != 404 || a.json(t)["code"] != "FILE_NOT_FOUND" {
		t.Fatalf("info missing: %d %s", a.status, a.body)
	}
	rng := map[string]string{"Range": "bytes=2-4"}
	for k, v := range hdr {
		rng[k] = v
	}
	if a := c.do("GET", base+"/files/download?path=/workspace/sub/f.txt", nil, rng); a.status != 206 || string(a.body) != "234" || a.header.Get("Content-Range") != "bytes 2-4/10" {
		t.Fatalf("range: %d %q %v", a.status, a.body, a.header)
	}
	rng["Range"] = "bytes=10-20"
	if a := c.do("GET", base+"/files/download?path=/workspace/sub/f.txt", nil, rng); a.status != 416 {
		t.Fatalf("range past the end: %d", a.status)
	}
	if a := c.do("DELETE", base+"/command?id=nope", nil, hdr); a.status != 500 || a.json(t)["code"] != "RUNTIME_ERROR" {
		t.Fatalf("interrupt unknown: %d %s", a.status, a.body)
	}
	other := strings.Replace(base, "/44772", "/9", 1)
	if a := c.do("GET", other+"/ping", nil, hdr); a.status != 502 {
		t.Fatalf("closed port: %d", a.status)
	}

	// Egress policy read-back on port 18080 needs its auth header.
	eg := c.do("GET", "/v1/sandboxes/"+id+"/endpoints/18080?use_server_proxy=true", nil, nil).json(t)
	egBase := "http://" + eg["endpoint"].(string)
	egHdr := map[string]string{}
	for k, v := range eg["headers"].(map[string]any) {
		egHdr[k] = v.(string)
	}
	if egHdr[fakeopensandbox.EgressAuthHeader] == "" {
		t.Fatalf("egress endpoint headers %v", egHdr)
	}
	if a := c.do("GET", egBase+"/policy", nil, nil); a.status != 401 {
		t.Fatalf("policy without auth: %d", a.status)
	}
	pol := c.do("GET", egBase+"/policy", nil, egHdr).json(t)
	p := pol["policy"].(map[string]any)
	if pol["mode"] != "enforcing" || p["defaultAction"] != "deny" || len(p["egress"].([]any)) != 1 {
		t.Fatalf("policy %v", pol)
	}
	c.srv.SetIgnoreNetworkPolicy(true)
	if pol := c.do("GET", egBase+"/policy", nil, egHdr).json(t); pol["mode"] != "allow_all" {
		t.Fatalf("ignored policy reads back as %v", pol)
	}
}

func TestFaultHooks(t *testing.T) {
	c := start(t, fakeopensandbox.Options{})
	c.srv.FailNextWith(fakeopensandbox.RouteList, 2, 503)
	for i, want := range []int{503, 503, 200} {
		if a := c.do("GET", "/v1/sandboxes", nil, nil); a.status != want {
			t.Fatalf("call %d: %d, want %d", i, a.status, want)
		}
	}
}
