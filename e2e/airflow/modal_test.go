package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The fake's local driver keeps a budget lock in its root for as long as
// the root exists: that is not a sandbox left behind, but a sandbox's
// directory is.
func TestSandboxFilesInSkipsTheDriversOwnFiles(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, ".budget.lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if left := sandboxFilesIn(root); len(left) != 0 {
		t.Fatalf("only the budget lock is there, but it lists %v", left)
	}
	if err := os.Mkdir(filepath.Join(root, "airflow-sandbox-0123456789ab"), 0o700); err != nil {
		t.Fatal(err)
	}
	if left := sandboxFilesIn(root); !slices.Equal(left, []string{"airflow-sandbox-0123456789ab"}) {
		t.Fatalf("a sandbox's directory is there, but it lists %v", left)
	}
}
