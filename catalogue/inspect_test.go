package catalogue

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/footer"
)

// inspect refuses a packed bundle config asking a backend for what it
// cannot do, as --airflow-metadata and the task would; pack never writes
// such a bundle, so this one is assembled by hand.
func TestInspectRefusesAPackedConfigTheBackendsCannotServe(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "exe")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The supervisor schema Airflow 3.3 (task SDK 1.3) knows, which pack
	// declares by default.
	const declared = "2026-06-16"
	m := footer.Manifest{MetadataVersion: footer.MetadataVersion, Source: "bundle.yaml",
		SDK:  footer.SDK{Language: "go", Version: "v0", SupervisorSchemaVersion: declared},
		Dags: map[string]footer.Dag{"d": {Tasks: []string{"t"}}}}
	inspect := func(cfg string) (int, string) {
		out := filepath.Join(dir, "b.bundle")
		if _, err := footer.Pack(out, exe, []byte(cfg), m); err != nil {
			t.Fatal(err)
		}
		os.Chmod(out, 0o755)
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), []string{"inspect", out}, &stdout, &stderr)
		return code, stderr.String()
	}
	if code, errs := inspect(`dags: {d: {tasks: {t: {kind: provision, defaults: {gpu: A10G}}}}}`); code == 0 || !strings.Contains(errs, "gpu: the local backend cannot provide GPUs") {
		t.Fatalf("gpu on local: exit %d, %s", code, errs)
	}
	// Packed before pack checked it: the rules of every sandbox, in the
	// config's keys.
	if code, errs := inspect(`dags: {d: {tasks: {t: {kind: provision, defaults: {lifetime: 48h}}}}}`); code == 0 || !strings.Contains(errs, "lifetime: 48h0m0s is longer than the 24h0m0s maximum") {
		t.Fatalf("lifetime over 24h: exit %d, %s", code, errs)
	}
	if code, errs := inspect(`dags: {d: {tasks: {t: {kind: provision, defaults: {backend: modal, gpu: A10G}}}}}`); code != 0 {
		t.Fatalf("gpu on modal is fine: exit %d, %s", code, errs)
	}
}
