package tasks

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	_ "github.com/airflow-sandbox/airflow-go-worker/testing/dirstore" // all a bundle adds for a new store
)

// A store in a package of its own (testing/dirstore, dir://) is linked by
// one import line and nothing else: the tasks stage its objects in and
// export to it, with the connection its URLs name, checked against its
// connection type; its URLs appear among the supported ones.
func TestAStoreOfItsOwnPackageNeedsOneImport(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.deps.Stores = nil // storage.Default: whatever stores the binary links
	root := t.TempDir()
	for _, dir := range []string{"in", "out"} {
		if err := os.Mkdir(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "in", "data.csv"), []byte("a,b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.af.conns["dirs"] = connections.Connection{ConnID: "dirs", ConnType: "dirstore", Host: root}
	e.af.conns["web"] = connections.Connection{ConnID: "web", ConnType: "http", Host: root}

	id, err := Provision(ctx, e.deps, ProvisionInput{StageIn: map[string]string{"data.csv": "dir://dirs@in/data.csv"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := RunCommands(ctx, e.deps, RunInput{Sandbox: SandboxRef{ID: id}, Command: Commands{"tr a-z A-Z < data.csv > up.csv"}}); err != nil {
		t.Fatal(err)
	}
	urls, err := Export(ctx, e.deps, ExportInput{Sandbox: SandboxRef{ID: id}, Exports: map[string]string{"up.csv": "dir://out/{run_id}/up.csv"}, ExportConnID: "dirs"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "out", e.deps.Run.RunID, "up.csv"))
	if err != nil || string(got) != "A,B\n" || len(urls) != 1 || !strings.HasPrefix(urls[0], "dir://out/") {
		t.Fatalf("exported %q to %v: %v", got, urls, err)
	}

	_, err = Provision(ctx, e.deps, ProvisionInput{StageIn: map[string]string{"data.csv": "dir://in/data.csv"}, StorageConnID: "web"})
	if err == nil || !strings.Contains(err.Error(), `connection "web" has type "http", not dirstore; dir:// URLs need a dirstore connection`) || !final.Is(err) {
		t.Errorf("a connection of the wrong type: %v", err)
	}
	_, err = Provision(ctx, e.deps, ProvisionInput{StageIn: map[string]string{"data.csv": "in/data.csv"}})
	if err == nil || !strings.Contains(err.Error(), "dir://bucket/key") {
		t.Errorf("the supported URLs must list the new store: %v", err)
	}
}
