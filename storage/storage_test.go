package storage_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/storage"

	"github.com/hashicorp/go-hclog"

	_ "github.com/airflow-sandbox/airflow-go-worker/testing/dirstore" // a store of its own package: one import line links it
	"github.com/airflow-sandbox/airflow-go-worker/testing/storagetest"
	"github.com/airflow-sandbox/airflow-go-worker/testing/waitwriter"
)

func TestUnsupportedScheme(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{"https://example.com/x", "ftp://host/x"} {
		_, err := storage.Put(ctx, u, strings.NewReader("x"), storage.Options{})
		if err == nil || !strings.Contains(err.Error(), "no store this bundle links reads") || !strings.Contains(err.Error(), "supported here: dir://bucket/key, file:///absolute/path") {
			t.Errorf("Put %s: want an unsupported-scheme error listing the supported ones, got %v", u, err)
		}
		if _, err := storage.Open(ctx, u, storage.Options{}); err == nil || !strings.Contains(err.Error(), "no store this bundle links reads") {
			t.Errorf("Open %s: got %v", u, err)
		}
		if _, err := storage.NewExport(storage.Options{}).Stage(ctx, u, strings.NewReader("x"), 1); err == nil || !strings.Contains(err.Error(), "no store this bundle links reads") {
			t.Errorf("Stage %s: got %v", u, err)
		}
	}
}

// A URL naming a connection must come with that store's credentials: the
// caller resolves the connection, and falling back to the store's default
// credentials would write with the wrong identity.
func TestURLNamingAConnectionNeedsIt(t *testing.T) {
	_, err := storage.Put(context.Background(), "dir://my_dirs@bucket/key", strings.NewReader("x"), storage.Options{})
	if err == nil || !strings.Contains(err.Error(), `names connection "my_dirs"; resolve it (a dirstore connection)`) || !strings.Contains(err.Error(), "Options.Credentials") {
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
	opt := storage.Options{Logger: log, ProgressEvery: 1} // every nanosecond: the ticker fires as soon as it can
	w, err := storage.Put(context.Background(), a.URL("slow.bin"), r, opt)
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
	e := storage.NewExport(a.Options)
	defer e.Abort(ctx)
	if _, err := e.Stage(ctx, a.URL("same"), strings.NewReader("1"), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Stage(ctx, a.URL("same"), strings.NewReader("2"), 1); err == nil || !strings.Contains(err.Error(), "already part of the export") {
		t.Fatalf("got %v", err)
	}
}
