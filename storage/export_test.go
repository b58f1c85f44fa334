package storage

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

var partialRE = regexp.MustCompile(`\.[0-9a-f]{12}\.partial$`)

func TestExportCommitLandsEveryFile(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		files := map[string][]byte{
			"out/report.parquet":         randomBytes(3<<20, 1),
			"out/deep/new/dir/empty.txt": {},
			"logs/run.log":               []byte("hello\n"),
		}
		e := NewExport(b.opt)
		if !partialRE.MatchString("x" + e.PartialSuffix()) {
			t.Fatalf("partial suffix %q is not .<12 hex>.partial", e.PartialSuffix())
		}
		var partials []string
		for key, data := range files {
			w, err := e.Stage(ctx, b.url(key), bytes.NewReader(data))
			if err != nil {
				t.Fatalf("Stage %s: %v", key, err)
			}
			if w.URL != b.url(key) || w.Size != int64(len(data)) || w.SHA256 != sha256Hex(data) {
				t.Fatalf("Stage %s returned %+v", key, w)
			}
			partials = append(partials, key+e.PartialSuffix())
		}
		// Staged, not landed: only partials exist.
		assertObjects(t, b, partials...)

		urls, err := e.Commit(ctx)
		if err != nil {
			t.Fatalf("Commit: %v", err)
		}
		if len(urls) != len(files) {
			t.Fatalf("Commit returned %v", urls)
		}
		var keys []string
		for key, data := range files {
			keys = append(keys, key)
			if got := readAll(t, b, key); !bytes.Equal(got, data) {
				t.Fatalf("%s: landed content differs", key)
			}
		}
		assertObjects(t, b, keys...)
		if err := e.Abort(ctx); err != nil {
			t.Fatalf("Abort after Commit should be a no-op, got %v", err)
		}
		assertObjects(t, b, keys...)
		if _, err := e.Commit(ctx); err == nil {
			t.Fatal("a second Commit succeeded")
		}
	})
}

func TestExportStageFailureLandsNothing(t *testing.T) {
	data := randomBytes(PartSize+PartSize/2, 3)
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		e := NewExport(b.opt)
		if _, err := e.Stage(ctx, b.url("a.bin"), bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		_, err := e.Stage(ctx, b.url("b.bin"), failAfter(data, PartSize+10)) // fails inside the second part
		if err == nil || !strings.Contains(err.Error(), errInjected.Error()) || !strings.Contains(err.Error(), b.url("b.bin")) {
			t.Fatalf("want the injected error naming the destination, got %v", err)
		}
		// Only a's partial remains; b left nothing, not even a pending upload.
		assertObjects(t, b, "a.bin"+e.PartialSuffix())

		urls, err := e.Commit(ctx)
		if err == nil || !strings.Contains(err.Error(), b.url("b.bin")) || !strings.Contains(err.Error(), "no destination was changed") {
			t.Fatalf("Commit after a failed Stage: got urls=%v err=%v", urls, err)
		}
		assertObjects(t, b) // nothing at any destination, no partial
	})
}

func TestExportAbortRemovesPartials(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		e := NewExport(b.opt)
		for _, k := range []string{"x/1", "x/2"} {
			if _, err := e.Stage(ctx, b.url(k), strings.NewReader(k)); err != nil {
				t.Fatal(err)
			}
		}
		// A cancelled context (a task being stopped) must not prevent cleanup.
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := e.Abort(cctx); err != nil {
			t.Fatalf("Abort: %v", err)
		}
		assertObjects(t, b)
		if err := e.Abort(ctx); err != nil {
			t.Fatalf("second Abort: %v", err)
		}
		if _, err := e.Stage(ctx, b.url("x/3"), strings.NewReader("late")); err == nil || !strings.Contains(err.Error(), "aborted") {
			t.Fatalf("Stage after Abort: %v", err)
		}
		if _, err := e.Commit(ctx); err == nil {
			t.Fatal("Commit after Abort succeeded")
		}
		assertObjects(t, b)
	})
}

func TestExportRejectsDuplicateDestination(t *testing.T) {
	b := fileBackend(t)
	ctx := context.Background()
	e := NewExport(b.opt)
	defer e.Abort(ctx)
	if _, err := e.Stage(ctx, b.url("same"), strings.NewReader("1")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Stage(ctx, b.url("same"), strings.NewReader("2")); err == nil || !strings.Contains(err.Error(), "already part of the export") {
		t.Fatalf("got %v", err)
	}
}

func TestExportConcurrentStages(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		e := NewExport(b.opt)
		keys := []string{"c/0", "c/1", "c/2", "c/3"}
		var wg sync.WaitGroup
		errs := make([]error, len(keys))
		for i, k := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = e.Stage(ctx, b.url(k), bytes.NewReader(randomBytes(256<<10, uint64(i))))
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		assertObjects(t, b, keys...)
	})
}

// TestExportCommitFailureMidway makes the second of three moves fail (its
// destination is a non-empty directory, which no rename can replace, even
// as root) and checks the error names what already landed and that no
// partial is left.
func TestExportCommitFailureMidway(t *testing.T) {
	b := fileBackend(t)
	ctx := context.Background()
	e := NewExport(b.opt)
	for _, k := range []string{"a", "b", "c"} {
		if _, err := e.Stage(ctx, b.url(k), strings.NewReader("content of "+k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(b.root, "b", "occupied"), 0o755); err != nil {
		t.Fatal(err)
	}
	urls, err := e.Commit(ctx)
	if err == nil {
		t.Fatal("Commit succeeded onto a directory")
	}
	for _, s := range []string{"already in place: " + b.url("a"), "moving " + b.url("b") + e.PartialSuffix() + " into " + b.url("b")} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q: %v", s, err)
		}
	}
	if len(urls) != 1 || urls[0] != b.url("a") {
		t.Errorf("in place = %v, want [%s]", urls, b.url("a"))
	}
	if got := string(readAll(t, b, "a")); got != "content of a" {
		t.Errorf("a = %q", got)
	}
	mustNotExist(t, filepath.Join(b.root, "c"))
	assertObjects(t, b, "a") // b's directory holds no file, c never landed, no partials
	if err := e.Abort(ctx); err != nil {
		t.Fatalf("Abort after a failed Commit: %v", err)
	}
}

// TestExportCommitChecksPartialsFirst removes a staged partial behind the
// export's back: Commit must notice before moving anything.
func TestExportCommitChecksPartialsFirst(t *testing.T) {
	b := s3Backend(t)
	ctx := context.Background()
	e := NewExport(b.opt)
	for _, k := range []string{"p/1", "p/2"} {
		if _, err := e.Stage(ctx, b.url(k), strings.NewReader(k)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.s3.Client().DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b.bucket), Key: aws.String("p/2" + e.PartialSuffix())}); err != nil {
		t.Fatal(err)
	}
	_, err := e.Commit(ctx)
	if err == nil || !strings.Contains(err.Error(), "no destination was changed") || !strings.Contains(err.Error(), b.url("p/2")+e.PartialSuffix()) {
		t.Fatalf("got %v", err)
	}
	assertObjects(t, b)
}

// TestS3MultipartCopy lowers the single-copy limit so that Commit takes the
// UploadPartCopy path S3 needs above 5 GiB, with a key that needs escaping.
func TestS3MultipartCopy(t *testing.T) {
	b := s3Backend(t)
	oldMax, oldPart := maxSingleCopy, copyPartSize
	maxSingleCopy, copyPartSize = 6<<20, 5<<20
	t.Cleanup(func() { maxSingleCopy, copyPartSize = oldMax, oldPart })

	ctx := context.Background()
	data := randomBytes(12<<20+3, 11)
	key := "dir with space/a+b=c&d.bin"
	e := NewExport(b.opt)
	if _, err := e.Stage(ctx, b.url(key), bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Stage(ctx, b.url("small"), strings.NewReader("small")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, b, key); !bytes.Equal(got, data) {
		t.Fatalf("multipart copy produced %d bytes that differ from the %d staged", len(got), len(data))
	}
	assertObjects(t, b, key, "small")
}

// TestExportAbortDuringStage aborts while a Stage is still writing: the
// Stage must fail and leave nothing, and the export must stay aborted.
func TestExportAbortDuringStage(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		e := NewExport(b.opt)
		if _, err := e.Stage(ctx, b.url("done"), strings.NewReader("staged before abort")); err != nil {
			t.Fatal(err)
		}
		reading, release := make(chan struct{}), make(chan struct{})
		r := io.MultiReader(strings.NewReader("some bytes"), &gateReader{started: reading, release: release})
		errc := make(chan error, 1)
		go func() {
			_, err := e.Stage(ctx, b.url("inflight"), r)
			errc <- err
		}()
		<-reading
		if _, err := e.Commit(ctx); err == nil || !strings.Contains(err.Error(), "still running") {
			t.Fatalf("Commit during a Stage: %v", err)
		}
		if err := e.Abort(ctx); err != nil {
			t.Fatalf("Abort: %v", err)
		}
		close(release)
		if err := <-errc; err == nil || !strings.Contains(err.Error(), "aborted") {
			t.Fatalf("in-flight Stage after Abort: %v", err)
		}
		assertObjects(t, b)
	})
}

// gateReader signals its first Read, then blocks until released, then EOF.
type gateReader struct {
	started, release chan struct{}
	once             sync.Once
}

func (g *gateReader) Read([]byte) (int, error) {
	g.once.Do(func() { close(g.started) })
	<-g.release
	return 0, io.EOF
}

// TestStageCancelledMidUpload cancels the task's context while a multipart
// upload is under way: nothing may remain, not even unfinished uploads
// (which S3 keeps, invisibly and billed, until aborted).
func TestStageCancelledMidUpload(t *testing.T) {
	data := randomBytes(2*PartSize+100, 5)
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		e := NewExport(b.opt)
		reading, release := make(chan struct{}), make(chan struct{})
		r := io.MultiReader(bytes.NewReader(data), &gateReader{started: reading, release: release})
		errc := make(chan error, 1)
		go func() {
			_, err := e.Stage(ctx, b.url("big.bin"), r)
			errc <- err
		}()
		<-reading // two parts handed over, the third is waiting for data
		cancel()
		close(release)
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("want a cancellation error, got %v", err)
		}
		if err := e.Abort(context.Background()); err != nil {
			t.Fatal(err)
		}
		assertObjects(t, b)
	})
}
