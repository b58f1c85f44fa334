package tasks

import (
	"context"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
)

// Issue 40: an export of 3 files to one bucket parsed its URLs 9 times
// (resolving the connection, checking the bucket, staging) and opened the
// bucket 4 times (a check per file, then the export), and for s3:// each
// open ran config.LoadDefaultConfig. A URL is now parsed once, where it
// enters the task, and a task's storage handle opens each bucket once per
// connection, for every check, transfer and listing.
func TestAnExportParsesEachURLOnceAndOpensTheBucketOnce(t *testing.T) {
	e := newEnv(t)
	e.af.conns["lake"] = connections.Connection{ConnID: "lake", ConnType: "aws", Login: "AKIA1", Password: "lake-secret-3"}
	id := provisioned(t, e)
	for _, f := range []string{"1.csv", "2.csv", "3.csv"} {
		writeIn(t, e, id, "/workspace/"+f, f)
	}
	if p, o := e.st.counts(); p != 0 || o != 0 {
		t.Fatalf("provisioning with no stage_in parsed %d URLs and opened %d buckets", p, o)
	}
	urls, err := Export(context.Background(), e.deps, ExportInput{Sandbox: SandboxRef{ID: id}, ExportConnID: "lake", Exports: map[string]string{
		"1.csv": "s3://out/run/1.csv", "2.csv": "s3://out/run/2.csv", "3.csv": "s3://out/run/3.csv"}})
	if err != nil || len(urls) != 3 || string(e.st.objects["s3://out/run/3.csv"]) != "3.csv" {
		t.Fatalf("export: %v, %v", urls, err)
	}
	if p, o := e.st.counts(); p != 3 || o != 1 {
		t.Errorf("an export of 3 files to one bucket parsed %d URLs and opened %d buckets; want 3 and 1", p, o)
	}
	if n := e.af.reads["lake"]; n != 1 {
		t.Errorf("the export read its connection %d times; want once", n)
	}
}

// One task that stages in, exports and lists (a Go task calling the
// tasks with one Deps, as catalogue.Adapt gives it: one handle per task
// instance) parses each URL once and opens the one bucket once: before,
// 2 objects in, 3 out and a listing parsed 17 times and opened 9 times.
func TestOneTaskOpensABucketOnceForStageInExportAndList(t *testing.T) {
	e := newEnv(t)
	e.af.conns["lake"] = connections.Connection{ConnID: "lake", ConnType: "aws", Login: "AKIA1", Password: "lake-secret-4"}
	e.st.objects["s3://data/in/a.csv"] = []byte("a")
	e.st.objects["s3://data/in/b.csv"] = []byte("b")
	ctx := context.Background()
	d := e.deps
	d.Storage = NewStorage(d.Stores)
	defer d.Storage.Close()

	id, err := Provision(ctx, d, ProvisionInput{StorageConnID: "lake", StageIn: map[string]string{
		"a.csv": "s3://data/in/a.csv", "b.csv": "s3://lake@data/in/b.csv"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := RunCommands(ctx, d, RunInput{Sandbox: SandboxRef{ID: id}, Command: Commands{"cat a.csv b.csv > c.csv"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := Export(ctx, d, ExportInput{Sandbox: SandboxRef{ID: id}, ExportConnID: "lake", Exports: map[string]string{
		"a.csv": "s3://data/out/a.csv", "b.csv": "s3://data/out/b.csv", "c.csv": "s3://data/out/c.csv"}}); err != nil {
		t.Fatal(err)
	}
	listed, err := List(ctx, d, ListInput{Prefix: "s3://data/out/", StorageConnID: "lake"})
	if err != nil || strings.Join(listed, " ") != "s3://data/out/a.csv s3://data/out/b.csv s3://data/out/c.csv" {
		t.Fatalf("listed %v, %v", listed, err)
	}
	if p, o := e.st.counts(); p != 6 || o != 1 {
		t.Errorf("2 objects staged in, 3 exported and a listing parsed %d URLs and opened %d buckets; want 6 and 1", p, o)
	}
	if n := e.af.reads["lake"]; n != 1 {
		t.Errorf("the task read its connection %d times; want once", n)
	}

	// Another connection is another identity: the same bucket is opened
	// again with it, not reached with the first one's credentials.
	e.af.conns["sea"] = connections.Connection{ConnID: "sea", ConnType: "aws", Login: "AKIA2", Password: "sea-secret-5"}
	if _, err := List(ctx, d, ListInput{Prefix: "s3://data/out/", StorageConnID: "sea"}); err != nil {
		t.Fatal(err)
	}
	if _, o := e.st.counts(); o != 2 {
		t.Errorf("a listing with another connection opened %d buckets in all; want 2", o)
	}
}

// Convert stages in and exports in one task function: with no handle in
// its Deps it makes one of its own, and opens a bucket both use once.
func TestConvertOpensABucketOnce(t *testing.T) {
	e := newEnv(t)
	e.st.objects["s3://data/in/doc.txt"] = []byte("hello\n")
	res, err := Convert(context.Background(), e.deps, ConvertInput{
		ProvisionInput: ProvisionInput{StageIn: map[string]string{"doc.txt": "s3://data/in/doc.txt"}},
		Command:        Commands{"tr a-z A-Z < doc.txt > up.txt"},
		Exports:        map[string]string{"up.txt": "s3://data/out/up.txt"}})
	if err != nil || string(e.st.objects["s3://data/out/up.txt"]) != "HELLO\n" {
		t.Fatalf("convert: %+v, %v", res, err)
	}
	if p, o := e.st.counts(); p != 2 || o != 1 {
		t.Errorf("a conversion parsed %d URLs and opened %d buckets; want 2 and 1", p, o)
	}
}
