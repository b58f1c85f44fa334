package storage

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/airflow-sandbox/airflow-go-worker/testing/s3server"
)

func writeAged(t *testing.T, p string, age time.Duration) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("left over"), 0o644); err != nil {
		t.Fatal(err)
	}
	when := time.Now().Add(-age)
	if err := os.Chtimes(p, when, when); err != nil {
		t.Fatal(err)
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// Issue 10, hole 10: a killed worker leaves temporary files and partials
// beside file:// destinations that nothing ever removed. Sweep removes
// those older than the age, and nothing else.
func TestSweepRemovesOldFileLeftovers(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	t.Setenv(FileRootsEnv, root)
	out := filepath.Join(root, "out")
	oldTmp := filepath.Join(out, "report.md.18f3a2b4c5d6e7f8.tmp")
	oldPartial := filepath.Join(out, "sub", "data.csv.0123456789ab.partial")
	oldPartialTmp := filepath.Join(out, "data.csv.0123456789ab.partial.18f3a2b4c5d6e7f9.tmp")
	freshTmp := filepath.Join(out, "live.bin.18f3a2b4c5d6e7fa.tmp") // an export still writing it
	userFiles := []string{filepath.Join(out, "report.md"), filepath.Join(out, "notes.tmp"), filepath.Join(out, "x.partial")}
	for _, p := range []string{oldTmp, oldPartial, oldPartialTmp} {
		writeAged(t, p, 48*time.Hour)
	}
	writeAged(t, freshTmp, time.Minute)
	for _, p := range userFiles {
		writeAged(t, p, 48*time.Hour)
	}
	// A symlinked directory inside the root leads outside: never followed.
	foreign := filepath.Join(outside, "theirs.0123456789ab.partial")
	writeAged(t, foreign, 48*time.Hour)
	if err := os.Symlink(outside, filepath.Join(out, "link")); err != nil {
		t.Fatal(err)
	}

	rep, err := SweepOlderThan(context.Background(), "file://"+out, 24*time.Hour, true, Options{})
	if err != nil || len(rep.Found) != 3 || len(rep.Removed) != 0 || !exists(oldTmp) {
		t.Fatalf("dry run: %+v, %v", rep, err)
	}
	rep, err = SweepOlderThan(context.Background(), "file://"+out, 24*time.Hour, false, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(rep.Removed)
	want := []string{"file://" + oldPartialTmp, "file://" + oldTmp, "file://" + oldPartial}
	sort.Strings(want)
	if strings.Join(rep.Removed, " ") != strings.Join(want, " ") {
		t.Fatalf("removed %v, want %v", rep.Removed, want)
	}
	for _, p := range want {
		if exists(strings.TrimPrefix(p, "file://")) {
			t.Errorf("%s is still there", p)
		}
	}
	for _, p := range append(userFiles, freshTmp, foreign) {
		if !exists(p) {
			t.Errorf("%s was removed; sweep must only take old leftovers of ours under the prefix", p)
		}
	}
}

func TestSweepFileObeysTheRoots(t *testing.T) {
	root := t.TempDir()
	t.Setenv(FileRootsEnv, "")
	if _, err := SweepOlderThan(context.Background(), "file://"+root, time.Hour, false, Options{}); err == nil || !strings.Contains(err.Error(), FileRootsEnv) {
		t.Fatalf("without roots: %v", err)
	}
	t.Setenv(FileRootsEnv, filepath.Join(root, "allowed"))
	os.Mkdir(filepath.Join(root, "allowed"), 0o755)
	victim := filepath.Join(root, "etc", "passwd.0123456789ab.partial")
	writeAged(t, victim, 48*time.Hour)
	_, err := SweepOlderThan(context.Background(), "file://"+filepath.Join(root, "etc"), time.Hour, false, Options{})
	if err == nil || !strings.Contains(err.Error(), "outside the directories") || !exists(victim) {
		t.Fatalf("outside the roots: %v", err)
	}
	if _, err := SweepOlderThan(context.Background(), "file://"+filepath.Join(root, "allowed", "../etc"), time.Hour, false, Options{}); err == nil || !exists(victim) {
		t.Fatalf("climbing out with ..: %v", err)
	}
}

// On S3 the leftovers are .partial objects and multipart uploads never
// completed (up to 830 MB measured after an outage), invisible in the
// bucket listing but billed.
func TestSweepRemovesOldS3Leftovers(t *testing.T) {
	srv := s3server.Start(t)
	const bucket = "sweep"
	srv.CreateBucket(t, bucket)
	cfg, err := AWSFromConnection(srv.Connection("s3_test"))
	if err != nil {
		t.Fatal(err)
	}
	opt := Options{Credentials: map[string]Credentials{"s3": &cfg}}
	c := srv.Client()
	ctx := context.Background()
	put := func(key string) {
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader([]byte("x"))}); err != nil {
			t.Fatal(err)
		}
	}
	put("runs/r1/report.md.0123456789ab.partial")
	put("runs/r1/report.md")
	put("other/data.csv.0123456789ab.partial") // outside the prefix
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String("runs/r1/big.bin")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String("runs/r1/big.bin"), UploadId: up.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader(make([]byte, 1<<20))}); err != nil {
		t.Fatal(err)
	}

	// Nothing is an hour old yet: nothing is touched.
	rep, err := SweepOlderThan(ctx, "s3://"+bucket+"/runs/", time.Hour, false, opt)
	if err != nil || len(rep.Found) != 0 {
		t.Fatalf("young leftovers: %+v, %v", rep, err)
	}
	// A cutoff in the future stands for "after the age has passed".
	rep, err = Sweep(ctx, "s3://"+bucket+"/runs/", time.Now().Add(time.Minute), false, opt)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, l := range rep.Found {
		kinds[l.URL] = l.Kind
	}
	if len(rep.Removed) != 2 || kinds["s3://sweep/runs/r1/report.md.0123456789ab.partial"] != LeftoverPartial || kinds["s3://sweep/runs/r1/big.bin"] != LeftoverMultipart {
		t.Fatalf("found %v, removed %v", kinds, rep.Removed)
	}
	ups, err := c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil || len(ups.Uploads) != 0 {
		t.Fatalf("uploads left: %v, %v", ups, err)
	}
	objs, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objs.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	sort.Strings(keys)
	if strings.Join(keys, " ") != "other/data.csv.0123456789ab.partial runs/r1/report.md" {
		t.Fatalf("objects left: %v", keys)
	}
}
