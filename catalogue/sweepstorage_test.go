package catalogue

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// Issue 10, hole 10: `sweep --storage URL_PREFIX --older-than DURATION`
// clears what killed exports left beside file:// destinations.
func TestSweepCommandClearsStorageLeftovers(t *testing.T) {
	root := t.TempDir()
	t.Setenv(storage.FileRootsEnv, root)
	left := filepath.Join(root, "out", "report.md.18f3a2b4c5d6e7f8.tmp")
	kept := filepath.Join(root, "out", "report.md")
	for _, p := range []string{left, kept} {
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte("x"), 0o644)
		old := time.Now().Add(-3 * time.Hour)
		os.Chtimes(p, old, old)
	}
	var out, errOut bytes.Buffer
	args := []string{"--storage", "file://" + filepath.Join(root, "out"), "--older-than", "2h"}
	if err := sweepCommand(context.Background(), append(args, "--dry-run"), &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "would remove file://"+left) || !strings.Contains(out.String(), "1 leftovers found, 0 removed") {
		t.Fatalf("dry run printed:\n%s", out.String())
	}
	if _, err := os.Stat(left); err != nil {
		t.Fatal("a dry run removed something")
	}
	out.Reset()
	if err := sweepCommand(context.Background(), args, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left); err == nil || !strings.Contains(out.String(), "1 leftovers found, 1 removed") {
		t.Fatalf("the leftover is still there; printed:\n%s", out.String())
	}
	if _, err := os.Stat(kept); err != nil {
		t.Fatal("the destination itself was removed")
	}
	if strings.Contains(out.String(), "sandboxes:") {
		t.Fatalf("--storage alone should not sweep sandboxes:\n%s", out.String())
	}
	if err := sweepCommand(context.Background(), []string{"--storage", "file:///etc"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "outside the directories") {
		t.Fatalf("a prefix outside the roots: %v", err)
	}
}
