package footer

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// A packed source region is indexed as one file (the Gen C source index),
// and the index reads back and checks out.
func TestPackIndexesTheSource(t *testing.T) {
	out := filepath.Join(t.TempDir(), "bundle")
	src := []byte("dags:\n  d:\n    tasks: {t: {kind: destroy}}\n")
	if _, err := Pack(out, writeTemp(t, "exe", fakeBinary(4096)), src, sampleManifest()); err != nil {
		t.Fatal(err)
	}
	b, err := Read(out)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := SourceIndex("bundle.yaml", src)
	if !reflect.DeepEqual(b.Manifest.Sources, want) || b.Manifest.EntrypointPath != "bundle.yaml" {
		t.Fatalf("sources %+v, entrypoint %q", b.Manifest.Sources, b.Manifest.EntrypointPath)
	}
	if err := b.CheckSourceIndex(); err != nil {
		t.Fatalf("the packed index does not check out: %v", err)
	}
	// No source, no index.
	empty := filepath.Join(t.TempDir(), "empty")
	if _, err := Pack(empty, writeTemp(t, "exe", fakeBinary(4096)), nil, sampleManifest()); err != nil {
		t.Fatal(err)
	}
	e, err := Read(empty)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Manifest.Sources) != 0 || e.Manifest.EntrypointPath != "" || e.CheckSourceIndex() != nil {
		t.Fatalf("an empty source region got an index: %+v %q", e.Manifest.Sources, e.Manifest.EntrypointPath)
	}
}

// CheckSourceIndex refuses every index a Gen C reader would.
func TestCheckSourceIndexRefusesBadIndexes(t *testing.T) {
	src := []byte("abcdef")
	good := func() *Bundle {
		idx, entry := SourceIndex("a.yaml", src[:4])
		rest, _ := SourceIndex("b.yaml", src[4:])
		rest[0].Offset = 4
		return &Bundle{Source: src, Manifest: Manifest{Sources: append(idx, rest...), EntrypointPath: entry}}
	}
	if err := good().CheckSourceIndex(); err != nil {
		t.Fatalf("a good two-file index: %v", err)
	}
	for _, tc := range []struct {
		name  string
		spoil func(b *Bundle)
		want  string
	}{
		{"none for a source", func(b *Bundle) { b.Manifest.Sources = nil }, "lists no sources for the 6-byte"},
		{"past the region", func(b *Bundle) { b.Manifest.Sources[1].Length = 5 }, "does not fit"},
		{"negative", func(b *Bundle) { b.Manifest.Sources[0].Offset = -1 }, "does not fit"},
		{"a gap", func(b *Bundle) { b.Manifest.Sources[1].Offset, b.Manifest.Sources[1].Length = 5, 1 }, "starts at 5"},
		{"wrong hash", func(b *Bundle) { b.Manifest.Sources[0].SHA256 = strings.Repeat("0", 64) }, "hashes to"},
		{"twice", func(b *Bundle) { b.Manifest.Sources[1].Path = "a.yaml" }, "twice"},
		{"short", func(b *Bundle) { b.Manifest.Sources = b.Manifest.Sources[:1] }, "cover 4 of the 6"},
		{"entrypoint elsewhere", func(b *Bundle) { b.Manifest.EntrypointPath = "b.yaml" }, "not the first"},
		{"no path", func(b *Bundle) { b.Manifest.Sources[0].Path = "" }, "no path"},
	} {
		b := good()
		tc.spoil(b)
		if err := b.CheckSourceIndex(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
