package footer

import (
	"os"
	"path/filepath"
	"testing"
)

// benchBinary writes a 64 MiB stand-in executable once per benchmark.
func benchBinary(b *testing.B) string {
	b.Helper()
	p := filepath.Join(b.TempDir(), "exe")
	if err := os.WriteFile(p, fakeBinary(64<<20), 0o755); err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkPack64MiB measures packing a 64 MiB executable: one streamed
// copy-and-hash pass; allocations must not grow with the binary.
func BenchmarkPack64MiB(b *testing.B) {
	bin := benchBinary(b)
	out := filepath.Join(b.TempDir(), "bundle")
	b.SetBytes(64 << 20)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Pack(out, bin, []byte("source"), sampleManifest()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRead64MiB measures full validation (hash included) of a 64 MiB bundle.
func BenchmarkRead64MiB(b *testing.B) {
	out := filepath.Join(b.TempDir(), "bundle")
	if _, err := Pack(out, benchBinary(b), []byte("source"), sampleManifest()); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(64 << 20)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Read(out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadSource measures what a bundle pays at every task start to
// find its embedded config: no hashing, so independent of binary size.
func BenchmarkReadSource(b *testing.B) {
	out := filepath.Join(b.TempDir(), "bundle")
	if _, err := Pack(out, benchBinary(b), []byte("source"), sampleManifest()); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok, err := ReadSource(out); err != nil || !ok {
			b.Fatal(err, ok)
		}
	}
}
