package tasks

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

func TestListReturnsTheObjectsToMapOver(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(storage.FileRootsEnv, dir)
	for _, name := range []string{"in/west.csv", "in/north.csv", "in/readme.txt", "in/north.csv.0123456789ab.partial"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e := newEnv(t)
	e.deps.Stores = nil // storage.Default, with the real file:// store
	got, err := List(context.Background(), e.deps, ListInput{Prefix: "file://" + dir + "/in/", Match: "*.csv"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"file://" + dir + "/in/north.csv", "file://" + dir + "/in/west.csv"}
	if !slices.Equal(got, want) {
		t.Fatalf("List = %v, want %v (sorted, no leftover, no readme)", got, want)
	}
	if !strings.Contains(e.log.String(), "objects=2") {
		t.Errorf("the task log must say how many objects it listed:\n%s", e.log.String())
	}
	// The limit is the caller's: one is too few here.
	if _, err := List(context.Background(), e.deps, ListInput{Prefix: "file://" + dir + "/in/", Match: "*.csv", Max: 1}); !final.Is(err) || !strings.Contains(err.Error(), "more than 1") {
		t.Errorf("over max: want a final error saying so, got %v", err)
	}
}

func TestListRefusesBadInput(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		in   ListInput
		want string
	}{
		{ListInput{}, "prefix is empty"},
		{ListInput{Prefix: "s3://bucket/in/", Max: -1}, "max is -1"},
		{ListInput{Prefix: "s3://bucket/in/", Max: maxListMax + 1}, "from 1 to"},
		// The prefix's connection is resolved (with the prefix parser: the
		// key ends with /) before anything is listed.
		{ListInput{Prefix: "s3://nowhere@bucket/in/"}, `connection "nowhere" does not exist`},
		{ListInput{Prefix: "s3://bucket/in/", StorageConnID: "missing"}, `connection "missing" does not exist`},
	} {
		_, err := List(context.Background(), e.deps, c.in)
		if !final.Is(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: want a final error containing %q, got %v", c.in, c.want, err)
		}
	}
}

// A bucket store's prefix is listed through the task's storage handle,
// with the connection the task names.
func TestListABucketWithTheTasksConnection(t *testing.T) {
	e := newEnv(t)
	e.af.conns["lake"] = connections.Connection{ConnID: "lake", ConnType: "aws", Login: "AKIA1", Password: "lake-secret-2"}
	for _, k := range []string{"in/b.csv", "in/a.csv", "in/notes.txt", "out/c.csv"} {
		e.st.objects["s3://bucket/"+k] = []byte(k)
	}
	got, err := List(context.Background(), e.deps, ListInput{Prefix: "s3://bucket/in/", Match: "*.csv", StorageConnID: "lake"})
	if want := []string{"s3://bucket/in/a.csv", "s3://bucket/in/b.csv"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("List = %v, %v; want %v", got, err, want)
	}
	if !slices.Contains(e.af.masked, "lake-secret-2") {
		t.Error("the listing's connection secret was not masked")
	}
}
