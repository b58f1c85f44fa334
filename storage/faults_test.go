package storage_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/storage"

	"github.com/airflow-sandbox/airflow-go-worker/testing/storagetest"
	"github.com/airflow-sandbox/airflow-go-worker/testing/waitwriter"
)

// faultyStore wraps a real store and makes chosen uploads fail to abort,
// a failure a real server will not produce on demand.
type faultyStore struct {
	storage.Driver
	abortFails func(key string) bool
}

var errNoAbort = errors.New("abort refused by test")

func (f *faultyStore) Upload(ctx context.Context, key string, r io.Reader, size int64) (storage.Pending, error) {
	p, err := f.Driver.Upload(ctx, key, r, size)
	if err != nil || f.abortFails == nil || !f.abortFails(key) {
		return p, err
	}
	return stuckPending{p}, nil
}

type stuckPending struct{ storage.Pending }

func (s stuckPending) Abort(ctx context.Context) error {
	_ = s.Pending.Abort(ctx) // still clean up the real temporary file
	return errNoAbort
}

func TestAbortNamesUploadsItCouldNotDiscard(t *testing.T) {
	a, _ := storagetest.FileArea(t)
	ctx := context.Background()
	st, err := storage.NewFileStoreForTest()
	if err != nil {
		t.Fatal(err)
	}
	h := a.Handle(t, storage.Options{})
	storage.InjectStoreForTest(h, &faultyStore{Driver: st, abortFails: func(key string) bool { return strings.HasSuffix(key, "/stuck") }})
	e := h.NewExport()
	for _, k := range []string{"ok", "stuck"} {
		if _, err := e.Stage(ctx, a.Loc(t, k), strings.NewReader(k), -1); err != nil {
			t.Fatal(err)
		}
	}
	err = e.Abort(ctx)
	if err == nil || !strings.Contains(err.Error(), a.URL("stuck")) || strings.Contains(err.Error(), a.URL("ok")) {
		t.Fatalf("want an error naming only the stuck upload, got %v", err)
	}
}

// TestExportCommitFailureMidway makes the second of three commits fail (its
// destination is a non-empty directory, which no rename can replace, even
// as root) and checks the error names what already landed and that nothing
// else is left.
func TestExportCommitFailureMidway(t *testing.T) {
	a, root := storagetest.FileArea(t)
	ctx := context.Background()
	e := a.Handle(t, storage.Options{}).NewExport()
	for _, k := range []string{"a", "b", "c"} {
		if _, err := e.Stage(ctx, a.Loc(t, k), strings.NewReader("content of "+k), -1); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "b", "occupied"), 0o755); err != nil {
		t.Fatal(err)
	}
	urls, err := e.Commit(ctx)
	if err == nil {
		t.Fatal("Commit succeeded onto a directory")
	}
	for _, s := range []string{"already in place: " + a.URL("a"), "commit failed at " + a.URL("b")} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q: %v", s, err)
		}
	}
	if len(urls) != 1 || urls[0] != a.URL("a") {
		t.Errorf("in place = %v, want [%s]", urls, a.URL("a"))
	}
	if got := string(storagetest.ReadAll(t, a, "a")); got != "content of a" {
		t.Errorf("a = %q", got)
	}
	storagetest.AssertObjects(t, a, "a") // b's directory holds no file, c never landed, no temporary files
	if err := e.Abort(ctx); err != nil {
		t.Fatalf("Abort after a failed Commit: %v", err)
	}
}

func TestOpenLogsDownloadProgress(t *testing.T) {
	a, _ := storagetest.FileArea(t)
	ctx := context.Background()
	data := storagetest.RandomBytes(1<<20, 9)
	if _, err := a.Handle(t, storage.Options{}).Put(ctx, a.Loc(t, "dl.bin"), strings.NewReader(string(data))); err != nil {
		t.Fatal(err)
	}
	sink := waitwriter.New("transfer progress")
	rc, err := a.Handle(t, storage.Options{Logger: hclog.New(&hclog.LoggerOptions{Output: sink}), ProgressEvery: 1}).Open(ctx, a.Loc(t, "dl.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(rc, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	<-sink.Seen() // the reporter ticks on its own, even while the reader is idle
	rest, err := io.ReadAll(rc)
	if err != nil || len(rest) != len(data)-1000 {
		t.Fatalf("read %d more bytes, err %v", len(rest), err)
	}
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
	out := sink.String()
	for _, s := range []string{"op=download", "url=" + a.URL("dl.bin"), "transfer finished", "bytes=1048576"} {
		if !strings.Contains(out, s) {
			t.Errorf("log lacks %q:\n%s", s, out)
		}
	}
}
