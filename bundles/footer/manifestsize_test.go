package footer

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/testing/memwatch"
)

// rawBundle is a bundle whose metadata region holds meta as it is, however
// the packer would have refused it.
func rawBundle(meta []byte) []byte {
	bin := []byte("\x7fELF not really an executable")
	t := newTrailer(0, uint32(len(meta)), sha256.Sum256(bin))
	tb, _ := t.MarshalBinary()
	return bytes.Join([][]byte{bin, meta, tb}, nil)
}

const manifestHead = "sdk: {supervisor_schema_version: \"2026-06-16\"}\ndags: {d: {tasks: [t]}}\n"

// repeated is n lines (or items) made by f.
func repeated(n int, f func(b *strings.Builder, i int)) string {
	var b strings.Builder
	for i := range n {
		f(&b, i)
	}
	return b.String()
}

// bareKeys is a flow mapping of n bare keys: each comma is two YAML
// nodes (a key and its null value), the costliest shape per byte.
func bareKeys(n int) string {
	return "x: {" + repeated(n, func(b *strings.Builder, i int) { fmt.Fprintf(b, "k%d,", i) }) + "z}\n"
}

// readWatched reads meta as a bundle's manifest and returns the process's
// peak resident set while it did, and the error.
func readWatched(meta []byte) (memwatch.Peak, error) {
	b := rawBundle(meta)
	watch := memwatch.Start()
	_, err := ReadFrom(bytes.NewReader(b), int64(len(b)))
	return watch.Stop(), err
}

// maxReadRSS bounds the process's peak resident set while it reads one
// manifest: every task start reads its bundle's own.
const maxReadRSS = 64 << 20

// Issue 19, hole 6: a 7 MB manifest of short values took 504 MB to read
// (the YAML parser's nodes). It is refused by its size, unread.
func TestLargeManifestIsRefusedBeforeItIsParsed(t *testing.T) {
	meta := []byte(manifestHead + "x: [" + strings.Repeat("1,", 3_500_000) + "1]\n")
	peak, err := readWatched(meta)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "over the") {
		t.Fatalf("want a refusal saying the manifest is too large, got %v", err)
	}
	t.Logf("a %d-byte manifest: heap growth %d MiB", len(meta), peak.HeapGrowth()>>20)
	if peak.HeapGrowth() > 32<<20 {
		t.Fatalf("reading the %d-byte manifest grew the heap by %d MiB; want it refused before parsing", len(meta), peak.HeapGrowth()>>20)
	}
	for name, decode := range map[string]func([]byte) (Manifest, error){"ParseManifest": ParseManifest, "DecodeManifest": DecodeManifest} {
		if _, err := decode(meta); err == nil {
			t.Errorf("%s accepted it", name)
		}
	}
	// A metadata region larger than any manifest is refused unread.
	huge := rawBundle(make([]byte, MaxManifestSize+1))
	if _, err := ReadFrom(bytes.NewReader(huge), int64(len(huge))); err == nil || !strings.Contains(err.Error(), "over the") {
		t.Fatalf("a %d-byte metadata region: got %v", MaxManifestSize+1, err)
	}
}

// Issue 38, item 8: a 3.8 MB manifest of bare keys in a flow mapping
// (under the old 16 MiB and 500,000-value bounds) cost 332 MB of RSS
// before it was refused. It is refused by its size now, before it is
// parsed, with the process under 64 MiB. (Failed before the fix: 290 MiB
// of RSS growth.)
func TestCraftedManifestIsRefusedInLittleMemory(t *testing.T) {
	meta := []byte(manifestHead + bareKeys(495_000))
	if len(meta) < 3_800_000 {
		t.Fatalf("the crafted manifest is %d bytes; the probe's was 3.8 MB", len(meta))
	}
	peak, err := readWatched(meta)
	t.Logf("a %d-byte manifest: peak RSS %d MiB (%d MiB at the start), heap growth %d MiB", len(meta), peak.RSS>>20, peak.BaseRSS>>20, peak.HeapGrowth()>>20)
	if err == nil {
		t.Fatal("the crafted manifest was accepted")
	}
	if peak.RSS == 0 {
		t.Fatal("no resident-set figure: /proc/self/status is unreadable")
	}
	if peak.RSS > maxReadRSS {
		t.Fatalf("reading it took the process to %d MiB of RSS, over %d MiB", peak.RSS>>20, maxReadRSS>>20)
	}
}

// What fits within both bounds, in the shapes that cost the most per
// byte, is read (or refused) with the process under 64 MiB.
func TestCraftedManifestsStaySmall(t *testing.T) {
	// Each just under maxManifestValues (a comma counts 2, a "k:\n" line 2,
	// a "- a\n" line 2) or MaxManifestSize.
	n := maxManifestValues/2 - 100
	for name, body := range map[string]string{
		"bare keys in a flow mapping": bareKeys(n),
		"keys with null values":       repeated(n, func(b *strings.Builder, i int) { fmt.Fprintf(b, "k%d:\n", i) }),
		"a block sequence":            "x:\n" + strings.Repeat("- a\n", n),
		"a flow sequence":             "x: [" + strings.Repeat("a,", n) + "a]\n",
		"one long string":             "x: \"" + strings.Repeat("a", MaxManifestSize-200) + "\"\n",
	} {
		t.Run(name, func(t *testing.T) {
			meta := []byte(manifestHead + body)
			if err := checkManifestSize(meta); err != nil {
				t.Fatalf("the test's manifest should be within the bounds: %v", err)
			}
			peak, err := readWatched(meta)
			t.Logf("%d bytes: read (error %v), peak RSS %d MiB (%d at the start), heap growth %d MiB", len(meta), err, peak.RSS>>20, peak.BaseRSS>>20, peak.HeapGrowth()>>20)
			if peak.RSS == 0 || peak.RSS > maxReadRSS {
				t.Fatalf("peak RSS %d MiB; want it under %d MiB", peak.RSS>>20, maxReadRSS>>20)
			}
		})
	}
}

// The bounds leave room for what pack renders: some 12,000 Dags of 3 tasks.
func TestManifestOfManyDagsIsPackedAndRead(t *testing.T) {
	m := Manifest{MetadataVersion: MetadataVersion, SDK: SDK{SupervisorSchemaVersion: "2026-06-16"}, Dags: map[string]Dag{}}
	for i := range 11_900 {
		m.Dags[fmt.Sprintf("dag_%05d", i)] = Dag{Tasks: []string{"extract", "transform", "load"}}
	}
	meta, err := m.Render()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseManifest(meta)
	if err != nil || len(got.Dags) != 11_900 {
		t.Fatalf("a %d-byte manifest of 11,900 Dags: %d read, %v", len(meta), len(got.Dags), err)
	}
	// One more Dag in twenty is refused, by pack as by the reader.
	for i := range 600 {
		m.Dags[fmt.Sprintf("more_%05d", i)] = Dag{Tasks: []string{"extract", "transform", "load"}}
	}
	meta, _ = m.Render()
	if _, err := ParseManifest(meta); err == nil || !strings.Contains(err.Error(), "split the bundle") {
		t.Fatalf("12,500 Dags: want a refusal saying to split the bundle, got %v", err)
	}
	bin := writeTemp(t, "exe", []byte("\x7fELF not really an executable"))
	if _, err := Pack(bin+".bundle", bin, nil, m); err == nil || !strings.Contains(err.Error(), "cannot be packed") {
		t.Fatalf("pack should refuse what no task start could read, got %v", err)
	}
}
