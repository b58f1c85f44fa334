package storage_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/storage"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/testing/dirstore" // a store of its own package: one import line links it
	"github.com/airflow-sandbox/airflow-go-worker/testing/storagetest"
	"github.com/airflow-sandbox/airflow-go-worker/testing/waitwriter"
)

func TestUnsupportedScheme(t *testing.T) {
	for _, u := range []string{"https://example.com/x", "ftp://host/x"} {
		_, err := storage.Default.Parse(u)
		if err == nil || !strings.Contains(err.Error(), "no store this bundle links reads") || !strings.Contains(err.Error(), "supported here: dir://bucket/key, file:///absolute/path") {
			t.Errorf("Parse %s: want an unsupported-scheme error listing the supported ones, got %v", u, err)
		}
	}
}

// A URL naming a connection must come with that store's credentials: the
// caller resolves the connection, and falling back to the store's default
// credentials would write with the wrong identity.
func TestURLNamingAConnectionNeedsIt(t *testing.T) {
	loc, err := storage.Default.Parse("dir://my_dirs@bucket/key")
	if err != nil {
		t.Fatal(err)
	}
	h := storage.Default.NewHandle(storage.Options{})
	defer h.Close()
	h.Connect("dir", "", &dirstore.Config{Root: t.TempDir()}) // another connection's
	_, err = h.Put(context.Background(), loc, strings.NewReader("x"))
	if err == nil || !strings.Contains(err.Error(), `names connection "my_dirs", which was not resolved; read it (a dirstore connection)`) || !strings.Contains(err.Error(), "Handle.Connect") {
		t.Errorf("Put: got %v", err)
	}
}

// TestProgressIsLogged drives a transfer that cannot finish until a
// progress line has been logged, so the assertion does not depend on timing.
func TestProgressIsLogged(t *testing.T) {
	sink := waitwriter.New("transfer progress")
	log := hclog.New(&hclog.LoggerOptions{Output: sink, Level: hclog.Info})
	a, _ := storagetest.FileArea(t)
	r := io.MultiReader(strings.NewReader("first chunk"), &waitReader{until: sink.Seen()}, strings.NewReader("rest"))
	h := a.Handle(t, storage.Options{Logger: log, ProgressEvery: 1}) // every nanosecond: the ticker fires as soon as it can
	w, err := h.Put(context.Background(), a.Loc(t, "slow.bin"), r)
	if err != nil {
		t.Fatal(err)
	}
	out := sink.String()
	for _, s := range []string{"transfer progress", "op=upload", "url=" + a.URL("slow.bin"), "mib_per_s=", "transfer finished", fmt.Sprintf("bytes=%d", w.Size)} {
		if !strings.Contains(out, s) {
			t.Errorf("log lacks %q:\n%s", s, out)
		}
	}
}

// waitReader returns EOF once until is closed (blocking until then).
type waitReader struct{ until <-chan struct{} }

func (r *waitReader) Read([]byte) (int, error) { <-r.until; return 0, io.EOF }

func TestExportRejectsDuplicateDestination(t *testing.T) {
	a, _ := storagetest.FileArea(t)
	ctx := context.Background()
	e := a.Handle(t, storage.Options{}).NewExport()
	defer e.Abort(ctx)
	if _, err := e.Stage(ctx, a.Loc(t, "same"), strings.NewReader("1"), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Stage(ctx, a.Loc(t, "same"), strings.NewReader("2"), 1); err == nil || !strings.Contains(err.Error(), "already part of the export") {
		t.Fatalf("got %v", err)
	}
}
