package fakeopensandbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"github.com/airflow-sandbox/airflow-go-worker/testing/fakeopensandbox"
)

// execd talks to one sandbox's execd through the server proxy.
type execd struct {
	t    *testing.T
	c    client
	id   string
	base string
	hdr  map[string]string
}

func newExecd(t *testing.T, opts fakeopensandbox.Options, createBody string) execd {
	t.Helper()
	if opts.Linger == 0 {
		opts.Linger = 50 * time.Millisecond
	}
	c := start(t, opts)
	if createBody == "" {
		createBody = validCreate
	}
	id := c.create(createBody)
	ep := c.do("GET", "/v1/sandboxes/"+id+"/endpoints/44772?use_server_proxy=true", nil, nil).json(t)
	e := execd{t: t, c: c, id: id, base: "http://" + ep["endpoint"].(string), hdr: map[string]string{}}
	if h, ok := ep["headers"].(map[string]any); ok {
		for k, v := range h {
			e.hdr[k] = v.(string)
		}
	}
	return e
}

func (e execd) do(method, p string, body io.Reader, extra map[string]string) answer {
	e.t.Helper()
	h := map[string]string{}
	for k, v := range e.hdr {
		h[k] = v
	}
	for k, v := range extra {
		h[k] = v
	}
	return e.c.do(method, e.base+p, body, h)
}

type ev struct {
	Type  string `json:"type"`
	Text  string `json:"text"`
	Error *struct {
		Value     string   `json:"evalue"`
		Traceback []string `json:"traceback"`
	} `json:"error"`
}

// parseEvents splits a whole stream body into its events.
func parseEvents(t *testing.T, body []byte) []ev {
	t.Helper()
	var out []ev
	for _, chunk := range strings.Split(string(body), "\n\n") {
		if strings.TrimSpace(chunk) == "" {
			continue
		}
		var e ev
		if err := json.Unmarshal([]byte(chunk), &e); err != nil {
			t.Fatalf("event %q is not JSON: %v", chunk, err)
		}
		out = append(out, e)
	}
	return out
}

// run runs a command and returns its events and the stdout lines.
func (e execd) run(command string) ([]ev, string) {
	e.t.Helper()
	body, _ := json.Marshal(map[string]any{"command": command, "cwd": "/workspace"})
	a := e.do("POST", "/command", bytes.NewReader(body), map[string]string{"Content-Type": "application/json"})
	if a.status != 200 {
		e.t.Fatalf("command %q: %d %s", command, a.status, a.body)
	}
	evs := parseEvents(e.t, a.body)
	var out []string
	for _, x := range evs {
		if x.Type == "stdout" {
			out = append(out, strings.TrimSuffix(x.Text, "\n"))
		}
	}
	return evs, strings.Join(out, "\n")
}

// sh runs a command that must succeed and returns its stdout.
func (e execd) sh(command string) string {
	e.t.Helper()
	evs, out := e.run(command)
	if terminal(evs).Type != "execution_complete" {
		e.t.Fatalf("%q failed: %+v", command, evs)
	}
	return out
}

func terminal(evs []ev) ev {
	for _, x := range evs {
		if x.Type == "execution_complete" || x.Type == "error" {
			return x
		}
	}
	return ev{}
}

type pair struct {
	meta       string
	content    string
	noFilename bool
}

// upload posts parts in the given order: metadata parts, then file parts,
// when interleave is false.
func (e execd) upload(pairs []pair, interleave bool) answer {
	e.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	metaPart := func(p pair) {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="metadata"; filename="metadata"`)
		h.Set("Content-Type", "application/json")
		w, _ := mw.CreatePart(h)
		w.Write([]byte(p.meta))
	}
	filePart := func(p pair) {
		h := textproto.MIMEHeader{}
		if p.noFilename {
			h.Set("Content-Disposition", `form-data; name="file"`)
		} else {
			h.Set("Content-Disposition", `form-data; name="file"; filename="file"`)
		}
		w, _ := mw.CreatePart(h)
		w.Write([]byte(p.content))
	}
	if interleave {
		for _, p := range pairs {
			metaPart(p)
			filePart(p)
		}
	} else {
		for _, p := range pairs {
			metaPart(p)
		}
		for _, p := range pairs {
			filePart(p)
		}
	}
	mw.Close()
	return e.do("POST", "/files/upload", &buf, map[string]string{"Content-Type": mw.FormDataContentType()})
}

func (e execd) code(a answer) string {
	e.t.Helper()
	var m map[string]any
	json.Unmarshal(a.body, &m)
	s, _ := m["code"].(string)
	return s
}

func forVersions(t *testing.T, fn func(t *testing.T, version string)) {
	for _, v := range fakeopensandbox.Versions {
		t.Run(v, func(t *testing.T) { fn(t, v) })
	}
}

func TestUnknownRoutesAnswerGinText(t *testing.T) {
	e := newExecd(t, fakeopensandbox.Options{}, "")
	for _, r := range []struct{ method, path string }{{"GET", "/no/such/route"}, {"PUT", "/files/info"}, {"GET", "/command"}} {
		a := e.do(r.method, r.path, nil, nil)
		if a.status != 404 || string(a.body) != "404 page not found" || !strings.HasPrefix(a.header.Get("Content-Type"), "text/plain") {
			t.Errorf("%s %s: %d %q %v", r.method, r.path, a.status, a.body, a.header)
		}
	}
}

func TestSymlinksAsExecdSeesThem(t *testing.T) {
	forVersions(t, func(t *testing.T, version string) {
		e := newExecd(t, fakeopensandbox.Options{Version: version}, "")
		e.sh("mkdir d && echo keep > d/inside && ln -s d dlink && ln -s missing/target.txt dangling && ln -s gone.txt dangling2 && echo t > t.txt && ln -s t.txt flink")

		// DELETE /files stats through the link.
		a := e.do("DELETE", "/files?path=/workspace/dlink", nil, nil)
		if a.status != 500 || e.code(a) != "RUNTIME_ERROR" || !strings.Contains(string(a.body), "path is a directory") {
			t.Errorf("delete of a symlink to a directory: %d %s", a.status, a.body)
		}
		if a := e.do("DELETE", "/files?path=/workspace/dangling2", nil, nil); a.status != 200 {
			t.Errorf("delete of a dangling symlink: %d %s", a.status, a.body)
		}
		if got := e.sh("test -L dangling2 && echo still-a-link"); got != "still-a-link" {
			t.Errorf("a dangling symlink was removed by DELETE /files (%q)", got)
		}
		if a := e.do("DELETE", "/files?path=/workspace/flink", nil, nil); a.status != 200 {
			t.Errorf("delete of a symlink to a file: %d %s", a.status, a.body)
		}
		if got := e.sh("test -e flink || echo gone; cat t.txt"); got != "gone\nt" {
			t.Errorf("after deleting a link to a file: %q", got)
		}

		// An upload follows the link and writes into its target.
		if a := e.upload([]pair{{meta: `{"path":"/workspace/dangling2","mode":644}`, content: "through"}}, true); a.status != 200 {
			t.Fatalf("upload onto a dangling symlink: %d %s", a.status, a.body)
		}
		if got := e.sh("test -L dangling2 && cat gone.txt"); got != "through" {
			t.Errorf("the upload did not land in the link's target: %q", got)
		}
		a = e.upload([]pair{{meta: `{"path":"/workspace/dlink","mode":644}`, content: "x"}}, true)
		if a.status != 500 || e.code(a) != "RUNTIME_ERROR" || !strings.Contains(string(a.body), "is a directory") {
			t.Errorf("upload onto a symlink to a directory: %d %s", a.status, a.body)
		}

		// DELETE /directories removes the link itself.
		for _, p := range []string{"dlink", "dangling"} {
			if a := e.do("DELETE", "/directories?path=/workspace/"+p, nil, nil); a.status != 200 {
				t.Errorf("DELETE /directories %s: %d %s", p, a.status, a.body)
			}
		}
		if got := e.sh("test -e dlink || test -L dlink || echo no-link; cat d/inside; test -L dangling || echo no-dangling"); got != "no-link\nkeep\nno-dangling" {
			t.Errorf("after DELETE /directories on links: %q", got)
		}
	})
}

// As real execd at both versions: mkdir re-applies the mode of an existing
// directory, and an unknown owner is only logged.
func TestMkdirAndOwners(t *testing.T) {
	forVersions(t, func(t *testing.T, version string) {
		e := newExecd(t, fakeopensandbox.Options{Version: version}, "")
		tmpMode := e.sh("stat -c %a /tmp")
		if tmpMode == "755" {
			t.Fatalf("/tmp starts as %s: the test cannot see a change", tmpMode)
		}
		if a := e.do("POST", "/directories", strings.NewReader(`{"/tmp":{"mode":755}}`), nil); a.status != 200 {
			t.Fatalf("mkdir /tmp: %d %s", a.status, a.body)
		}
		if got := e.sh("stat -c %a /tmp"); got != "755" {
			t.Errorf("mkdir of the existing /tmp left it %s, want 755", got)
		}
		if a := e.do("POST", "/directories", strings.NewReader(`{"/workspace/new/deep":{"mode":700}}`), nil); a.status != 200 {
			t.Fatalf("mkdir new: %d %s", a.status, a.body)
		}
		if got := e.sh("stat -c %a new/deep"); got != "700" {
			t.Errorf("a new directory got mode %s", got)
		}
		e.sh("echo f > afile")
		a := e.do("POST", "/directories", strings.NewReader(`{"/workspace/afile/x":{"mode":755}}`), nil)
		if a.status != 500 || string(a.body) != `{"code":"RUNTIME_ERROR","message":"error accessing file: mkdir /workspace/afile: not a directory"}` {
			t.Errorf("mkdir below a file: %d %s", a.status, a.body)
		}
		a = e.upload([]pair{{meta: `{"path":"/workspace/owned.txt","mode":644,"owner":"no-such-user"}`, content: "o"}}, true)
		if a.status != 200 {
			t.Errorf("upload with an unknown owner: %d %s, want 200", a.status, a.body)
		}
		if got := e.sh("cat owned.txt"); got != "o" {
			t.Errorf("the file was not written: %q", got)
		}
		a = e.do("POST", "/directories", strings.NewReader(`{"/workspace/owned-dir":{"mode":755,"owner":"no-such-user"}}`), nil)
		if a.status != 200 {
			t.Errorf("mkdir with an unknown owner: %d %s, want 200", a.status, a.body)
		}
	})
}

func TestUploadForm(t *testing.T) {
	e := newExecd(t, fakeopensandbox.Options{}, "")
	// Parts match by index within each field name, not by order.
	a := e.upload([]pair{
		{meta: `{"path":"/workspace/one.txt","mode":644}`, content: "first"},
		{meta: `{"path":"/workspace/sub/two.txt","mode":600}`, content: "second"},
	}, false)
	if a.status != 200 {
		t.Fatalf("two pairs: %d %s", a.status, a.body)
	}
	if got := e.sh("cat one.txt; echo; cat sub/two.txt; echo; stat -c %a sub/two.txt"); got != "first\nsecond\n600" {
		t.Errorf("files: %q", got)
	}
	// A file part without a filename is a plain form value: no file at all.
	a = e.upload([]pair{{meta: `{"path":"/workspace/three.txt"}`, content: "3", noFilename: true}}, true)
	if a.status != 400 || string(a.body) != `{"code":"INVALID_FILE_CONTENT","message":"file is missing"}` {
		t.Errorf("file part without filename: %d %s", a.status, a.body)
	}
	// Without a mode a new file gets 0755.
	if a := e.upload([]pair{{meta: `{"path":"/workspace/nomode.txt"}`, content: "n"}}, true); a.status != 200 {
		t.Fatalf("no mode: %d %s", a.status, a.body)
	}
	if got := e.sh("stat -c %a nomode.txt"); got != "755" {
		t.Errorf("no mode: %s", got)
	}
	// A mode that is not octal digits fails after the file was written.
	a = e.upload([]pair{{meta: `{"path":"/workspace/badmode.txt","mode":999}`, content: "b"}}, true)
	if a.status != 500 || e.code(a) != "RUNTIME_ERROR" {
		t.Errorf("bad mode: %d %s", a.status, a.body)
	}
	if got := e.sh("cat badmode.txt"); got != "b" {
		t.Errorf("bad mode: the file was not written first (%q)", got)
	}
	// Outside the workdir and /tmp nothing persists: refused.
	if a := e.upload([]pair{{meta: `{"path":"/opt/x.txt","mode":644}`, content: "x"}}, true); a.status != 500 {
		t.Errorf("upload outside the writable areas: %d %s", a.status, a.body)
	}
}

func TestQuirksOfInfoListAndDelete(t *testing.T) {
	forVersions(t, func(t *testing.T, version string) {
		e := newExecd(t, fakeopensandbox.Options{Version: version}, "")
		e.sh("mkdir d && ln -s d dlink && echo x > f")
		if a := e.do("GET", "/files/info", nil, nil); a.status != 200 || strings.TrimSpace(string(a.body)) != "{}" {
			t.Errorf("info without path: %d %q", a.status, a.body)
		}
		if a := e.do("DELETE", "/files", nil, nil); a.status != 200 {
			t.Errorf("delete without path: %d %s", a.status, a.body)
		}
		a := e.do("GET", "/files/info?path=/workspace/f&path=/workspace/nope", nil, nil)
		info := e.do("GET", "/files/info?path=/workspace/dlink", nil, nil)
		if version == fakeopensandbox.VersionV1018 {
			if a.status != 500 || string(a.body) != `{"code":"RUNTIME_ERROR","message":"error accessing file: file not found: /workspace/nope"}` {
				t.Errorf("info with one missing path: %d %s", a.status, a.body)
			}
			// Through the link, and no type.
			if want := `"size":`; info.status != 200 || strings.Contains(string(info.body), `"type"`) || !strings.Contains(string(info.body), `"mode":755`) || !strings.Contains(string(info.body), want) {
				t.Errorf("info of a symlink to a directory: %d %s", info.status, info.body)
			}
			if a := e.do("GET", "/directories/list?path=/workspace/d", nil, nil); a.status != 404 || string(a.body) != "404 page not found" {
				t.Errorf("v1.0.18 has no /directories/list: %d %s", a.status, a.body)
			}
			return
		}
		if a.status != 404 || e.code(a) != "FILE_NOT_FOUND" {
			t.Errorf("info with one missing path: %d %s", a.status, a.body)
		}
		if info.status != 200 || !strings.Contains(string(info.body), `"type":"symlink"`) || !strings.Contains(string(info.body), `"mode":777`) {
			t.Errorf("info of a symlink: %d %s", info.status, info.body)
		}
		if a := e.do("GET", "/directories/list?path=/workspace/dlink", nil, nil); a.status != 400 || !strings.Contains(string(a.body), "refusing to traverse") {
			t.Errorf("list of a symlink: %d %s", a.status, a.body)
		}
		if a := e.do("GET", "/directories/list?path=/workspace/f", nil, nil); a.status != 400 || e.code(a) != "INVALID_REQUEST_BODY" || !strings.Contains(string(a.body), "path is not a directory") {
			t.Errorf("list of a file: %d %s", a.status, a.body)
		}
		e.sh("mkdir -p d/e/f && touch d/e/f/g")
		a = e.do("GET", "/directories/list?path=/workspace/d&depth=3", nil, nil)
		var list []map[string]any
		json.Unmarshal(a.body, &list)
		if len(list) != 3 || list[2]["path"] != "/workspace/d/e/f/g" {
			t.Errorf("depth 3: %s", a.body)
		}
	})
}

// readBody GETs u and reads its body until ctx ends, returning how the
// read ended: a deadline error is a body held open.
func readBody(t *testing.T, ctx context.Context, u string, hdr map[string]string) (*http.Response, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	return resp, err
}

// bodyBreaks reads u's body and reports how it ended: execd closes the
// connection at once after an answer whose Content-Length it does not
// send. A body still open near the test binary's deadline fails the test.
func bodyBreaks(t *testing.T, u string, hdr map[string]string) (*http.Response, error) {
	t.Helper()
	resp, err := readBody(t, deadline.Context(t), u, hdr)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GET %s: the body was held open", u)
	}
	return resp, err
}

func TestDownloadAnswers(t *testing.T) {
	forVersions(t, func(t *testing.T, version string) {
		e := newExecd(t, fakeopensandbox.Options{Version: version}, "")
		e.sh("printf 'l1\\nl2\\nl3\\nl4\\n' > lines.txt && : > empty && mkdir adir && printf 0123456789 > ten")
		get := func(q string, rng string) answer {
			h := map[string]string{}
			if rng != "" {
				h["Range"] = rng
			}
			return e.do("GET", "/files/download?"+q, nil, h)
		}
		// offset/limit (lines) are ignored: the whole file.
		a := get("path=/workspace/lines.txt&offset=2&limit=2", "")
		if a.status != 200 || string(a.body) != "l1\nl2\nl3\nl4\n" || a.header.Get("Content-Type") != "application/octet-stream" {
			t.Errorf("offset/limit: %d %q %v", a.status, a.body, a.header)
		}
		if a := get("path=/workspace/empty", "bytes=0-9"); a.status != 200 || len(a.body) != 0 {
			t.Errorf("range on an empty file: %d %q", a.status, a.body)
		}
		a = get("path=/workspace/ten", "bytes=20-30")
		if a.status != 416 || a.header.Get("Content-Range") != "bytes */10" || !strings.HasPrefix(a.header.Get("Content-Type"), "text/plain") {
			t.Errorf("range past the end: %d %v %q", a.status, a.header, a.body)
		}
		if a := get("path=/workspace/ten", "bytes=2-4,7-8"); a.status != 206 || string(a.body) != "234" || a.header.Get("Content-Range") != "bytes 2-4/10" {
			t.Errorf("first range only: %d %q %v", a.status, a.body, a.header)
		}
		if a := get("path=/workspace/missing", ""); a.status != 404 || e.code(a) != "FILE_NOT_FOUND" {
			t.Errorf("missing: %d %s", a.status, a.body)
		}
		// Malformed Range and a directory: a Content-Length it does not
		// send, and the connection closed.
		resp, err := bodyBreaks(t, e.base+"/files/download?path=/workspace/ten", map[string]string{"Range": "foo"})
		if resp.StatusCode != 416 || resp.ContentLength != 10 || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("malformed range: %d, Content-Length %d, body %v", resp.StatusCode, resp.ContentLength, err)
		}
		resp, err = bodyBreaks(t, e.base+"/files/download?path=/workspace/adir", nil)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Length") != "9223372036854775807" || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("directory: %d, Content-Length %q, body %v", resp.StatusCode, resp.Header.Get("Content-Length"), err)
		}
	})
}

func TestCommandStreamShape(t *testing.T) {
	e := newExecd(t, fakeopensandbox.Options{}, "")
	evs, _ := e.run("echo a; echo; printf b; echo c >&2; exit 3")
	if len(evs) < 3 || evs[0].Type != "init" || len(evs[0].Text) != 32 || evs[1].Type != "ping" {
		t.Fatalf("start of stream: %+v", evs)
	}
	last := evs[len(evs)-1]
	fin := terminal(evs)
	if fin.Type != "error" || fin.Error.Value != "3" || fin.Error.Traceback[0] != "exit status 3" {
		t.Errorf("terminal: %+v", fin)
	}
	if last.Type != "ping" {
		t.Errorf("no ping after the terminal event: last is %+v", last)
	}
	var out []string
	for _, x := range evs {
		if x.Type == "stdout" {
			out = append(out, x.Text)
		}
	}
	if strings.Join(out, "|") != "a|\n|b" {
		t.Errorf("stdout events %q", out)
	}
	body := func(s string) io.Reader { return strings.NewReader(s) }
	if a := e.do("POST", "/command", body(`{"command":"true","timeout":-5}`), nil); a.status != 400 || e.code(a) != "INVALID_REQUEST_BODY" {
		t.Errorf("negative timeout: %d %s", a.status, a.body)
	}
	if a := e.do("POST", "/command", body(`{"command":"true","timeout":0}`), nil); a.status != 200 || terminal(parseEvents(t, a.body)).Type != "execution_complete" {
		t.Errorf("timeout 0 means none: %d %s", a.status, a.body)
	}
	a := e.do("POST", "/command", body(`{"command":"echo start; sleep 5","timeout":300}`), nil)
	if fin := terminal(parseEvents(t, a.body)); fin.Type != "error" || fin.Error.Value != "-1" || fin.Error.Traceback[0] != "signal: killed" {
		t.Errorf("timeout: %+v", fin)
	}
}

// startStream posts a command and returns the open stream and its id.
func (e execd) startStream(command string) (io.ReadCloser, string) {
	e.t.Helper()
	req, _ := http.NewRequest("POST", e.base+"/command", strings.NewReader(fmt.Sprintf(`{"command":%q}`, command)))
	for k, v := range e.hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		e.t.Fatalf("start %q: %v %v", command, resp, err)
	}
	var first ev
	dec := json.NewDecoder(resp.Body)
	if err := dec.Decode(&first); err != nil || first.Type != "init" {
		e.t.Fatalf("first event %+v %v", first, err)
	}
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(dec.Buffered(), resp.Body), resp.Body}, first.Text
}

// waitLine reads the stream until an stdout event with text arrives.
func waitLine(t *testing.T, r io.Reader, text string) {
	t.Helper()
	dec := json.NewDecoder(r)
	for {
		var x ev
		if err := dec.Decode(&x); err != nil {
			t.Fatalf("stream ended before %q: %v", text, err)
		}
		if x.Type == "stdout" && x.Text == text {
			return
		}
	}
}

func TestInterruptBlocksAndReportsOwnStatus(t *testing.T) {
	e := newExecd(t, fakeopensandbox.Options{}, "")
	cases := []struct {
		name, command string
		evalue, trace string
	}{
		{"plain", "echo started; sleep 60", "-1", "signal: terminated"},
		{"traps TERM", "trap 'echo got-term; exit 7' TERM; echo started; sleep 60 & wait", "7", "exit status 7"},
		{"ignores TERM", "trap '' TERM; echo started; sleep 60", "-1", "signal: killed"},
		// The leader dies at once; a member of its group takes a moment
		// (well inside the 3 s before SIGKILL). The member says started
		// once its trap is set: said by the leader, the interrupt could
		// reach the member before its trap, under load.
		{"group outlives its leader", "(trap 'sleep 0.3; touch /workspace/late; exit 0' TERM; echo started; sleep 60 & wait) & wait", "-1", "signal: terminated"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stream, id := e.startStream(tc.command)
			defer stream.Close()
			rest := &bytes.Buffer{}
			tee := io.TeeReader(stream, rest)
			waitLine(t, tee, "started")
			if a := e.do("DELETE", "/command?id="+id, nil, nil); a.status != 200 {
				t.Fatalf("interrupt: %d %s", a.status, a.body)
			}
			// It answered only once the process group was gone.
			st := e.do("GET", "/command/status/"+id, nil, nil).json(t)
			if st["running"] != false || st["finished_at"] == nil {
				t.Errorf("status right after the interrupt: %v", st)
			}
			if tc.name == "group outlives its leader" && e.sh("test -e late && echo late || echo missing") != "late" {
				t.Errorf("the interrupt answered before the whole process group was gone")
			}
			tail, _ := io.ReadAll(stream)
			fin := terminal(parseEvents(t, append(rest.Bytes(), tail...)))
			if fin.Type != "error" || fin.Error.Value != tc.evalue || fin.Error.Traceback[0] != tc.trace {
				t.Errorf("terminal event %+v, want evalue %s (%s)", fin, tc.evalue, tc.trace)
			}
			if a := e.do("DELETE", "/command?id="+id, nil, nil); a.status != 500 || !strings.Contains(string(a.body), "is not running") {
				t.Errorf("second interrupt: %d %s", a.status, a.body)
			}
		})
	}
	if a := e.do("DELETE", "/command?id=nope", nil, nil); a.status != 500 || !strings.Contains(string(a.body), "no such session") {
		t.Errorf("unknown id: %d %s", a.status, a.body)
	}
}

func TestExecdTokenInEnvironment(t *testing.T) {
	for _, inEnv := range []bool{true, false} {
		t.Run(fmt.Sprintf("in env %v", inEnv), func(t *testing.T) {
			e := newExecd(t, fakeopensandbox.Options{ExecdToken: "tok-123456", ExecdTokenInEnv: inEnv}, "")
			if e.hdr[fakeopensandbox.ExecdTokenHeader] != "tok-123456" {
				t.Fatalf("endpoint headers %v", e.hdr)
			}
			bare := e.c.do("GET", e.base+"/ping", nil, nil)
			if bare.status != 401 || !strings.Contains(bare.json(t)["error"].(string), "X-EXECD-ACCESS-TOKEN") {
				t.Errorf("ping without the token: %d %s", bare.status, bare.body)
			}
			if a := e.do("GET", "/ping", nil, nil); a.status != 200 {
				t.Errorf("ping with the token: %d", a.status)
			}
			env := e.sh("env")
			if strings.Contains(env, "EXECD_ACCESS_TOKEN=tok-123456") != inEnv {
				t.Errorf("token in the command's env = %v, want %v:\n%s", !inEnv, inEnv, env)
			}
			if strings.Contains(env, "FAKE_EXECD") {
				t.Errorf("the fake's own plumbing reached the command:\n%s", env)
			}
		})
	}
}

// listener counts connections on the host's 127.0.0.1.
func listener(t *testing.T) (int, *atomic.Int32) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, &n
}

func withPolicy(policy string) string {
	return strings.Replace(validCreate, `"metadata"`, `"networkPolicy":`+policy+`,"metadata"`, 1)
}

func TestNetworkPolicyIsEnforced(t *testing.T) {
	port, accepted := listener(t)
	probe := fmt.Sprintf(`bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d' 2>/dev/null && echo connected || echo refused`, port)
	deny := `{"defaultAction":"deny","egress":[]}`
	cases := []struct {
		name   string
		opts   fakeopensandbox.Options
		create string
		want   string
	}{
		{"deny", fakeopensandbox.Options{}, withPolicy(deny), "refused"},
		{"deny with an allowlist", fakeopensandbox.Options{}, withPolicy(`{"defaultAction":"deny","egress":[{"action":"allow","target":"pypi.org"}]}`), "refused"},
		{"no defaultAction reads as deny", fakeopensandbox.Options{}, withPolicy(`{"egress":[]}`), "refused"},
		{"no policy, no sidecar", fakeopensandbox.Options{}, validCreate, "connected"},
		{"allow by default", fakeopensandbox.Options{}, withPolicy(`{"defaultAction":"allow","egress":[]}`), "connected"},
		{"server without sidecar", fakeopensandbox.Options{IgnoreNetworkPolicy: true}, withPolicy(deny), "connected"},
		{"sidecar that does not enforce", fakeopensandbox.Options{UnenforcedNetworkPolicy: true}, withPolicy(deny), "connected"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := accepted.Load()
			e := newExecd(t, tc.opts, tc.create)
			if got := e.sh(probe); got != tc.want {
				t.Errorf("probe: %q, want %q", got, tc.want)
			}
			if connected := accepted.Load() > before; connected != (tc.want == "connected") {
				t.Errorf("the listener saw a connection: %v", connected)
			}
		})
	}
	t.Run("unenforced policy still reads back as enforced", func(t *testing.T) {
		e := newExecd(t, fakeopensandbox.Options{UnenforcedNetworkPolicy: true}, withPolicy(deny))
		eg := e.c.do("GET", "/v1/sandboxes/"+e.id+"/endpoints/18080?use_server_proxy=true", nil, nil).json(t)
		hdr := map[string]string{}
		for k, v := range eg["headers"].(map[string]any) {
			hdr[k] = v.(string)
		}
		if pol := e.c.do("GET", "http://"+eg["endpoint"].(string)+"/policy", nil, hdr).json(t); pol["mode"] != "deny_all" {
			t.Errorf("policy %v", pol)
		}
	})
	t.Run("a policy it cannot enforce is refused", func(t *testing.T) {
		c := start(t, fakeopensandbox.Options{})
		a := c.do("POST", "/v1/sandboxes", strings.NewReader(withPolicy(`{"defaultAction":"allow","egress":[{"action":"deny","target":"evil.example"}]}`)), nil)
		if a.status != 400 || a.json(t)["code"] != "SANDBOX::INVALID_PARAMETER" || !strings.Contains(string(a.body), "cannot enforce") {
			t.Errorf("create: %d %s", a.status, a.body)
		}
		if n := len(c.srv.Sandboxes()); n != 0 {
			t.Errorf("%d sandboxes after a refused create", n)
		}
	})
}

func TestStreamAndFileFaults(t *testing.T) {
	e := newExecd(t, fakeopensandbox.Options{}, "")
	cmd := func() answer {
		return e.do("POST", "/command", strings.NewReader(`{"command":"echo one; echo two"}`), nil)
	}
	e.c.srv.DropNextStreamMidEvent(2)
	a := cmd()
	if !strings.HasPrefix(string(a.body), `{"type":"init"`) || strings.HasSuffix(string(a.body), "}\n\n") || strings.Count(string(a.body), "\n\n") != 2 {
		t.Errorf("mid-event drop: %q", a.body)
	}
	e.c.srv.Inject(fakeopensandbox.RouteCommand, 2, fakeopensandbox.Fault{Status: 500, Code: "RUNTIME_ERROR", Message: "boom"})
	if a := cmd(); a.status != 200 {
		t.Errorf("first call after Inject(2): %d", a.status)
	}
	if a := cmd(); a.status != 500 || e.code(a) != "RUNTIME_ERROR" {
		t.Errorf("second call after Inject(2): %d %s", a.status, a.body)
	}
	e.c.srv.SlowNext(fakeopensandbox.RouteInfo, 1, 300*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/files/info?path=/workspace", nil)
	_, err := http.DefaultClient.Do(req)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a slowed call answered within 50ms: %v", err)
	}

	e.sh("head -c 100000 /dev/zero > big")
	e.c.srv.StallNextDownload(1000)
	// Held, the read ends when this short wait does (a loaded host only
	// makes that surer).
	held, cancelHeld := context.WithTimeout(context.Background(), 500*time.Millisecond)
	resp, err := readBody(t, held, e.base+"/files/download?path=/workspace/big", nil)
	cancelHeld()
	if stalled := errors.Is(err, context.DeadlineExceeded); resp.StatusCode != 200 || !stalled {
		t.Errorf("stalled download: %d, held %v", resp.StatusCode, stalled)
	}
	e.sh("echo old > kept.txt")
	e.c.srv.CutNextUpload(100)
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="metadata"; filename="metadata"`)
	w, _ := mw.CreatePart(h)
	w.Write([]byte(`{"path":"/workspace/kept.txt","mode":644}`))
	fw, _ := mw.CreateFormFile("file", "file")
	fw.Write(bytes.Repeat([]byte("new"), 10000))
	mw.Close()
	req, _ = http.NewRequest("POST", e.base+"/files/upload", &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("a cut upload answered %d", resp.StatusCode)
	}
	if got := e.sh("cat kept.txt"); got != "old" {
		t.Errorf("a cut upload changed the file: %q", got)
	}
}
