package gcs_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
	"github.com/airflow-sandbox/airflow-go-worker/storage/gcs"
	"github.com/airflow-sandbox/airflow-go-worker/testing/storagetest"
)

// strictGCS is a Cloud Storage JSON API stand-in that is stricter than
// fake-gcs-server about the resumable protocol (every chunk but the last a
// multiple of 256 KiB, starting where the session stands; the checksum of
// the whole object) and can fail chunks the way the real service may: a
// 503, or keeping only part of a chunk.
type strictGCS struct {
	t  *testing.T
	mu sync.Mutex
	// objects are the finalised objects by name.
	objects map[string][]byte
	// sessions are the open sessions' bytes by id.
	sessions map[string][]byte
	// failChunk: the chunk PUT with this number (1-based, over the
	// server's life) answers 503; shortChunk keeps only half of it.
	failChunk, shortChunk, chunks int
	// failWhole: that many one-request uploads answer 503 first.
	failWhole, wholes int
	deleted           int  // sessions cancelled with DELETE
	corrupt           bool // downloads announce a wrong CRC32C
}

// newStrictGCS starts the server and returns a handle reaching it.
func newStrictGCS(t *testing.T) (*strictGCS, *storage.Handle) {
	s := &strictGCS{t: t, objects: map[string][]byte{}, sessions: map[string][]byte{}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	a := storagetest.Area{Connect: storagetest.Connection(t, "gs", connections.Connection{ConnID: "strict", ConnType: "google_cloud_platform",
		Extra: `{"gcs.endpoint": "` + srv.URL + `", "is_anonymous": true}`})}
	return s, a.Handle(t, storage.Options{})
}

func crc(b []byte) string {
	return base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))))
}

func (s *strictGCS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := r.URL.Path
	switch {
	case r.Method == http.MethodGet && p == "/storage/v1/b/bkt":
		fmt.Fprint(w, `{"name":"bkt"}`)
	case r.Method == http.MethodGet && strings.HasPrefix(p, "/storage/v1/b/bkt/o/"):
		data, ok := s.objects[strings.TrimPrefix(p, "/storage/v1/b/bkt/o/")]
		if !ok {
			http.Error(w, `{"error":{"code":404,"message":"No such object"}}`, http.StatusNotFound)
			return
		}
		sum := crc(data)
		if s.corrupt {
			sum = crc(append([]byte("x"), data...))
		}
		w.Header().Set("X-Goog-Hash", "crc32c="+sum+",md5=AAAAAAAAAAAAAAAAAAAAAA==")
		if r.URL.Query().Get("alt") == "media" {
			w.Write(data)
			return
		}
		fmt.Fprintf(w, `{"name":%q,"size":"%d"}`, "x", len(data))
	case r.Method == http.MethodPost && p == "/upload/storage/v1/b/bkt/o" && r.URL.Query().Get("uploadType") == "resumable":
		id := fmt.Sprintf("s%d", len(s.sessions)+s.deleted+1)
		s.sessions[id] = []byte{}
		w.Header().Set("Location", "http://"+r.Host+"/session/"+id+"?name="+r.URL.Query().Get("name"))
	case r.Method == http.MethodPost && p == "/upload/storage/v1/b/bkt/o" && r.URL.Query().Get("uploadType") == "multipart":
		s.multipart(w, r)
	case r.Method == http.MethodPut && strings.HasPrefix(p, "/session/"):
		s.chunk(w, r, strings.TrimPrefix(p, "/session/"))
	case r.Method == http.MethodDelete && strings.HasPrefix(p, "/session/"):
		delete(s.sessions, strings.TrimPrefix(p, "/session/"))
		s.deleted++
		w.WriteHeader(499)
	default:
		s.t.Errorf("unexpected request %s %s", r.Method, r.URL)
		http.Error(w, "unexpected", http.StatusBadRequest)
	}
}

func (s *strictGCS) multipart(w http.ResponseWriter, r *http.Request) {
	if s.wholes++; s.wholes <= s.failWhole {
		http.Error(w, "backend error", http.StatusServiceUnavailable)
		return
	}
	_, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	mr := multipart.NewReader(r.Body, params["boundary"])
	var meta struct{ Name, Crc32c string }
	part, _ := mr.NextPart()
	json.NewDecoder(part).Decode(&meta)
	part, _ = mr.NextPart()
	data, _ := io.ReadAll(part)
	if meta.Crc32c != crc(data) {
		http.Error(w, `{"error":{"code":400,"message":"checksum mismatch"}}`, http.StatusBadRequest)
		return
	}
	s.objects[meta.Name] = data
	fmt.Fprintf(w, `{"name":%q,"size":"%d","crc32c":%q}`, meta.Name, len(data), meta.Crc32c)
}

func (s *strictGCS) chunk(w http.ResponseWriter, r *http.Request, id string) {
	held, ok := s.sessions[id]
	if !ok {
		http.Error(w, `{"error":{"code":404,"message":"no such session"}}`, http.StatusNotFound)
		return
	}
	body, _ := io.ReadAll(r.Body)
	rng := strings.TrimPrefix(r.Header.Get("Content-Range"), "bytes ")
	span, total, _ := strings.Cut(rng, "/")
	reply308 := func() {
		if len(held) > 0 {
			w.Header().Set("Range", fmt.Sprintf("bytes=0-%d", len(held)-1))
		}
		w.WriteHeader(http.StatusPermanentRedirect)
	}
	if span == "*" && total == "*" {
		reply308() // a status query
		return
	}
	first, last, _ := strings.Cut(span, "-")
	from, _ := strconv.Atoi(first)
	to, _ := strconv.Atoi(last)
	if from != len(held) || to-from+1 != len(body) {
		s.t.Errorf("chunk %s with %d bytes, but the session holds %d", rng, len(body), len(held))
		http.Error(w, "bad range", http.StatusBadRequest)
		return
	}
	if total == "*" {
		s.chunks++
		if len(body)%(256<<10) != 0 {
			s.t.Errorf("chunk %s is not a multiple of 256 KiB", rng)
		}
		switch s.chunks {
		case s.failChunk:
			http.Error(w, "backend error", http.StatusServiceUnavailable)
			return
		case s.shortChunk:
			body = body[:len(body)/2]
		}
		s.sessions[id] = append(held, body...)
		held = s.sessions[id]
		reply308()
		return
	}
	data := append(held, body...)
	if strconv.Itoa(len(data)) != total {
		s.t.Errorf("final chunk %s leaves %d bytes", rng, len(data))
	}
	if got := r.Header.Get("X-Goog-Hash"); got != "crc32c="+crc(data) {
		http.Error(w, `{"error":{"code":400,"message":"checksum mismatch"}}`, http.StatusBadRequest)
		return
	}
	name := r.URL.Query().Get("name")
	s.objects[name] = data
	delete(s.sessions, id)
	fmt.Fprintf(w, `{"name":%q,"size":"%d","crc32c":%q}`, name, len(data), crc(data))
}

// counts are the chunk requests, the sessions cancelled and those open.
func (s *strictGCS) counts() (chunks, deleted, open int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.chunks, s.deleted, len(s.sessions)
}

func (s *strictGCS) object(name string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.objects[name]
	return b, ok
}

// TestResumableUploadRecovers: a 503 and a chunk the server kept only half
// of are resent from where the session stands, and the object is exactly
// the stream.
func TestResumableUploadRecovers(t *testing.T) {
	s, h := newStrictGCS(t)
	s.failChunk, s.shortChunk = 2, 3
	data := storagetest.RandomBytes(3*gcs.ChunkSize+5, 1)
	if _, err := h.Put(context.Background(), storagetest.Parse(t, "gs://bkt/big.bin"), bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	got, ok := s.object("big.bin")
	if !ok || !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes (ok=%v), want the %d streamed", len(got), ok, len(data))
	}
	// Three full chunks, one retried after the 503, one resent in part.
	if chunks, _, _ := s.counts(); chunks != 5 {
		t.Errorf("%d chunk requests, want 5", chunks)
	}
}

// TestSmallObjectIsOneRequest: an object within one chunk is stored whole
// at Commit with its checksum, and nothing is visible before.
func TestSmallObjectIsOneRequest(t *testing.T) {
	s, h := newStrictGCS(t)
	s.failWhole = 1 // and a 503 is retried
	e := h.NewExport()
	if _, err := e.Stage(context.Background(), storagetest.Parse(t, "gs://bkt/small"), strings.NewReader("hello"), 5); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.object("small"); ok {
		t.Fatal("visible before Commit")
	}
	if _, err := e.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.object("small"); string(got) != "hello" {
		t.Fatalf("stored %q", got)
	}
	if chunks, _, open := s.counts(); chunks != 0 || open != 0 {
		t.Errorf("a small object opened a session (%d chunks)", chunks)
	}
}

// TestAbortCancelsTheSession: an aborted export leaves no object and asks
// the server to drop the session's bytes.
func TestAbortCancelsTheSession(t *testing.T) {
	s, h := newStrictGCS(t)
	e := h.NewExport()
	data := storagetest.RandomBytes(gcs.ChunkSize+1, 2)
	if _, err := e.Stage(context.Background(), storagetest.Parse(t, "gs://bkt/a"), bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if err := e.Abort(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, ok := s.object("a")
	if _, deleted, open := s.counts(); ok || deleted != 1 || open != 0 {
		t.Fatalf("after Abort: object=%v, %d sessions cancelled, %d open", ok, deleted, open)
	}
}

// TestCorruptDownloadFails: a download whose bytes do not match the
// CRC32C the server announced fails at its end instead of passing as the
// object.
func TestCorruptDownloadFails(t *testing.T) {
	s, h := newStrictGCS(t)
	k := storagetest.Parse(t, "gs://bkt/k")
	if _, err := h.Put(context.Background(), k, strings.NewReader("content")); err != nil {
		t.Fatal(err)
	}
	read := func() error {
		rc, err := h.Open(context.Background(), k)
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = io.ReadAll(rc)
		return err
	}
	if err := read(); err != nil {
		t.Fatalf("intact download: %v", err)
	}
	s.mu.Lock()
	s.corrupt = true
	s.mu.Unlock()
	if err := read(); err == nil || !strings.Contains(err.Error(), "corrupted") {
		t.Fatalf("want a corruption error, got %v", err)
	}
	if errors.Is(read(), storage.ErrNotFound) {
		t.Fatal("corruption reported as a missing object")
	}
}
