package storage

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/testing/waitwriter"
)

// faultyStore wraps a real store and fails chosen operations, for the
// failure paths a real server will not produce on demand.
type faultyStore struct {
	store
	removeFails func(key string) bool
	moveLeaves  func(src string) bool // copy succeeds, deleting src fails
}

var errNoDelete = errors.New("delete refused by test")

func (f *faultyStore) remove(ctx context.Context, key string) error {
	if f.removeFails != nil && f.removeFails(key) {
		return errNoDelete
	}
	return f.store.remove(ctx, key)
}

func (f *faultyStore) move(ctx context.Context, src, dst string, size int64) error {
	if f.moveLeaves != nil && f.moveLeaves(src) {
		// Land a copy, keep the source: what S3 does when the delete fails.
		rc, err := f.store.open(ctx, src)
		if err != nil {
			return err
		}
		defer rc.Close()
		if err := f.store.write(ctx, dst, rc); err != nil {
			return err
		}
		return &errSourceLeft{errNoDelete}
	}
	return f.store.move(ctx, src, dst, size)
}

// exportWithFaults returns an export on the file backend whose store is
// wrapped by fs.
func exportWithFaults(t *testing.T, fs *faultyStore) *Export {
	st, err := openFileStore()
	if err != nil {
		t.Fatal(err)
	}
	fs.store = st
	e := NewExport(Options{})
	e.stores["file"] = fs
	return e
}

func TestCommitReportsPartialsItCouldNotDelete(t *testing.T) {
	b := fileBackend(t)
	ctx := context.Background()
	e := exportWithFaults(t, &faultyStore{moveLeaves: func(src string) bool { return strings.Contains(src, "/b.") }})
	for _, k := range []string{"a", "b"} {
		if _, err := e.Stage(ctx, b.url(k), strings.NewReader(k)); err != nil {
			t.Fatal(err)
		}
	}
	urls, err := e.Commit(ctx)
	if len(urls) != 2 {
		t.Fatalf("both destinations are in place, Commit returned %v", urls)
	}
	if err == nil || !strings.Contains(err.Error(), "every destination is in place") || !strings.Contains(err.Error(), b.url("b")+e.PartialSuffix()) {
		t.Fatalf("want an error naming the leftover partial, got %v", err)
	}
	assertObjects(t, b, "a", "b", "b"+e.PartialSuffix())
}

func TestAbortNamesPartialsItCouldNotRemove(t *testing.T) {
	b := fileBackend(t)
	ctx := context.Background()
	e := exportWithFaults(t, &faultyStore{removeFails: func(key string) bool { return strings.Contains(key, "/stuck.") }})
	for _, k := range []string{"ok", "stuck"} {
		if _, err := e.Stage(ctx, b.url(k), strings.NewReader(k)); err != nil {
			t.Fatal(err)
		}
	}
	err := e.Abort(ctx)
	if err == nil || !strings.Contains(err.Error(), b.url("stuck")+e.PartialSuffix()) || strings.Contains(err.Error(), b.url("ok")+e.PartialSuffix()) {
		t.Fatalf("want an error naming only the stuck partial, got %v", err)
	}
	assertObjects(t, b, "stuck"+e.PartialSuffix())
}

func TestOpenLogsDownloadProgress(t *testing.T) {
	b := fileBackend(t)
	ctx := context.Background()
	data := randomBytes(1<<20, 9)
	if _, err := Put(ctx, b.url("dl.bin"), strings.NewReader(string(data)), Options{}); err != nil {
		t.Fatal(err)
	}
	sink := waitwriter.New("transfer progress")
	rc, err := Open(ctx, b.url("dl.bin"), Options{Logger: hclog.New(&hclog.LoggerOptions{Output: sink}), ProgressEvery: 1})
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
	for _, s := range []string{"op=download", "url=" + b.url("dl.bin"), "transfer finished", "bytes=1048576"} {
		if !strings.Contains(out, s) {
			t.Errorf("log lacks %q:\n%s", s, out)
		}
	}
}
