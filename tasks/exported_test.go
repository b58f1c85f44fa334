package tasks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// An export tells Deps.OnExported what landed, once it is in place: each
// URL, its size and, when asked, its SHA-256; a failed export tells
// nothing, since nothing landed.
func TestExportReportsWhatItWrote(t *testing.T) {
	e := newEnv(t)
	id := provisioned(t, e)
	writeIn(t, e, id, "/workspace/a.txt", "AAA")
	writeIn(t, e, id, "/workspace/b.txt", "BBBB")
	var got []ExportedFile
	d := e.deps
	d.OnExported = func(f []ExportedFile) { got = append(got, f...) }
	if _, err := Export(context.Background(), d, ExportInput{Sandbox: SandboxRef{ID: id}, SHA256: true,
		Exports: map[string]string{"a.txt": "s3://out/a.txt", "b.txt": "s3://out/b.txt"}}); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("BBBB"))
	if len(got) != 2 || got[0].URL != "s3://out/a.txt" || got[0].Bytes != 3 || got[1].Bytes != 4 || got[1].SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("reported %+v", got)
	}
	got = nil
	if _, err := Export(context.Background(), d, ExportInput{Sandbox: SandboxRef{ID: id}, Exports: map[string]string{"a.txt": "s3://out/a2.txt"}}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].SHA256 != "" {
		t.Fatalf("without sha256: %+v (no checksum unless asked for)", got)
	}
	got = nil
	if _, err := Export(context.Background(), d, ExportInput{Sandbox: SandboxRef{ID: id},
		Exports: map[string]string{"a.txt": "s3://out/a3.txt", "missing.txt": "s3://out/m.txt"}}); err == nil {
		t.Fatal("exporting a missing file must fail")
	}
	if got != nil {
		t.Fatalf("a failed export reported %+v", got)
	}
}
