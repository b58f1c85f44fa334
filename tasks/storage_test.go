package tasks

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
)

// Go tasks read and write objects through the same connection handling as
// the catalogue: the connection's secret is masked.
func TestOpenAndPutObjectMaskTheConnection(t *testing.T) {
	e := newEnv(t)
	e.af.conns["lake"] = connections.Connection{ConnID: "lake", ConnType: "aws", Login: "AKIA1", Password: "lake-secret-1"}
	e.st.objects["s3://b/in.csv"] = []byte("a,b\n")
	rc, err := OpenObject(context.Background(), e.deps, "s3://b/in.csv", "lake")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "a,b\n" || !slices.Contains(e.af.masked, "lake-secret-1") {
		t.Fatalf("read %q, masked %v", got, e.af.masked)
	}
	url, err := PutObject(context.Background(), e.deps, "s3://b/out.txt", strings.NewReader("done\n"), 5, "")
	if err != nil || url != "s3://b/out.txt" || string(e.st.objects["s3://b/out.txt"]) != "done\n" {
		t.Fatalf("put: %q %v, objects %v", url, err, e.st.objects)
	}
	if _, err := OpenObject(context.Background(), e.deps, "s3://b/in.csv", "missing"); err == nil || !strings.Contains(err.Error(), `"missing"`) {
		t.Fatalf("a missing connection must be named: %v", err)
	}
}
