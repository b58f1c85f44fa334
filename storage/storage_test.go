package storage_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/storage"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/storage/storagetest"
	"github.com/airflow-sandbox/airflow-go-worker/testing/waitwriter"
)

func TestUnsupportedScheme(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{"https://example.com/x", "ftp://host/x"} {
		_, err := storage.Put(ctx, u, strings.NewReader("x"), storage.Options{})
		if err == nil || !strings.Contains(err.Error(), "unsupported scheme") || !strings.Contains(err.Error(), "supported: s3://") {
			t.Errorf("Put %s: want an unsupported-scheme error listing the supported ones, got %v", u, err)
		}
		if _, err := storage.Open(ctx, u, storage.Options{}); err == nil || !strings.Contains(err.Error(), "unsupported scheme") {
			t.Errorf("Open %s: got %v", u, err)
		}
		if _, err := storage.NewExport(storage.Options{}).Stage(ctx, u, strings.NewReader("x"), 1); err == nil || !strings.Contains(err.Error(), "unsupported scheme") {
			t.Errorf("Stage %s: got %v", u, err)
		}
	}
}

// TestNoCredentialsSaysWhichConnectionToCreate: a URL whose store has no
// connection and finds no default credentials names the connection type to
// create, before any network call.
func TestNoCredentialsSaysWhichConnectionToCreate(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, v := range []string{"GOOGLE_APPLICATION_CREDENTIALS", "GCE_METADATA_HOST", "STORAGE_EMULATOR_HOST",
		"AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_KEY", "AZURE_STORAGE_ACCOUNT_KEY"} {
		t.Setenv(v, "")
	}
	for u, want := range map[string]string{
		"gs://b/k":     "create a google_cloud_platform connection",
		"abfs://c/k":   "create a wasb connection",
		"azblob://c/k": "create a wasb connection",
	} {
		err := storage.Check(context.Background(), u, false, storage.Options{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check %s: want %q, got %v", u, want, err)
		}
	}
}

func TestURLNamingAConnectionNeedsIt(t *testing.T) {
	for u, want := range map[string]string{
		"s3://my_aws@bucket/key":  "Options.Credentials",
		"gs://my_gcp@bucket/key":  "Options.Credentials",
		"abfs://my_az@cont/key":   "Options.Credentials",
		"az://my_az@cont/key":     "Options.Credentials",
		"azblob://my_az@cont/key": "Options.Credentials",
	} {
		_, err := storage.Put(context.Background(), u, strings.NewReader("x"), storage.Options{})
		if err == nil || !strings.Contains(err.Error(), `"my_`) || !strings.Contains(err.Error(), want) {
			t.Errorf("Put %s: got %v", u, err)
		}
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
