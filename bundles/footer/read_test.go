package footer

import (
	"os"
	"path/filepath"
	"testing"
)

// The coordinator hashes only the binary; the cache digest is what notices
// an edit to the packed source after packing.
func TestCacheDigestNoticesAnEditedSource(t *testing.T) {
	out := filepath.Join(t.TempDir(), "bundle")
	if _, err := Pack(out, writeTemp(t, "exe", fakeBinary(4096)), []byte("dags: {}\n"), sampleManifest()); err != nil {
		t.Fatal(err)
	}
	b, err := Read(out)
	if err != nil {
		t.Fatal(err)
	}
	if ok, known, err := b.CacheDigestMatches(); !ok || !known || err != nil {
		t.Fatalf("fresh bundle: ok=%v known=%v err=%v", ok, known, err)
	}
	raw, _ := os.ReadFile(out)
	raw[b.SourceStart] = 'D' // "Dags: {}": still a valid bundle to the coordinator
	if err := os.WriteFile(out, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err = Read(out)
	if err != nil {
		t.Fatalf("an edited source region must still read (the coordinator accepts it): %v", err)
	}
	if ok, known, _ := b.CacheDigestMatches(); ok || !known {
		t.Fatalf("edited source: ok=%v known=%v, want a mismatch", ok, known)
	}
}
