package footer

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// fakeBinary is deterministic pseudo-random bytes standing in for an executable.
func fakeBinary(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func sampleManifest() Manifest {
	return Manifest{
		MetadataVersion: MetadataVersion,
		SDK:             SDK{Language: "go", Version: "v1.2.3", SupervisorSchemaVersion: "2026-10-30"},
		Source:          "bundle.yaml",
		Dags: map[string]Dag{
			"etl":  {Tasks: []string{"extract", "transform", "load"}},
			"123":  {Tasks: []string{"true", "yes", "2026-01-01"}},
			"solo": {Tasks: nil},
		},
		Extra: map[string]any{"x_vendor": map[string]any{"n": 3, "on": true, "list": []any{"a", 1.5, nil}}},
	}
}

func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// assemble lays out a bundle by hand, independently of Pack, so tests can
// build exactly the corruption they want.
func assemble(bin, src, meta []byte) []byte {
	var out bytes.Buffer
	out.Write(bin)
	out.Write(src)
	out.Write(meta)
	tr := make([]byte, 64)
	binary.LittleEndian.PutUint32(tr[0:], uint32(len(src)))
	binary.LittleEndian.PutUint32(tr[4:], uint32(len(meta)))
	binary.LittleEndian.PutUint32(tr[8:], 1)
	sum := sha256.Sum256(bin)
	copy(tr[12:44], sum[:])
	copy(tr[56:], []byte{0x41, 0x46, 0x42, 0x4E, 0x44, 0x4C, 0x30, 0x31})
	out.Write(tr)
	return out.Bytes()
}

const goodMeta = `airflow_bundle_metadata_version: "1.0"
sdk:
  language: "go"
  version: "v1"
  supervisor_schema_version: "2026-10-30"
source: "main.go"
dags:
  etl:
    tasks: ["a", "b"]
`

func TestPackWritesSpecLayout(t *testing.T) {
	bin := fakeBinary(300_000)
	src := []byte("dags:\n  etl: {}\n")
	binPath := writeTemp(t, "exe", bin)
	out := filepath.Join(t.TempDir(), "out.bundle")

	got, err := Pack(out, binPath, src, sampleManifest())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(out)
	if st.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", st.Mode().Perm())
	}
	if entries, _ := os.ReadDir(filepath.Dir(out)); len(entries) != 1 {
		t.Errorf("output dir holds %d entries, want only the bundle (temp file left behind?)", len(entries))
	}

	// Regions, from offset 0.
	if !bytes.Equal(data[:len(bin)], bin) {
		t.Fatal("binary region differs from the executable")
	}
	if !bytes.Equal(data[len(bin):len(bin)+len(src)], src) {
		t.Fatal("source region differs from the source")
	}
	tr := data[len(data)-64:]
	meta := data[len(bin)+len(src) : len(data)-64]

	// Trailer, field by field (spec 2.2).
	if v := binary.LittleEndian.Uint32(tr[0:4]); v != uint32(len(src)) {
		t.Errorf("source_len %d, want %d", v, len(src))
	}
	if v := binary.LittleEndian.Uint32(tr[4:8]); v != uint32(len(meta)) {
		t.Errorf("metadata_len %d, want %d", v, len(meta))
	}
	if v := binary.LittleEndian.Uint32(tr[8:12]); v != 1 {
		t.Errorf("footer_ver %d, want 1", v)
	}
	sum := sha256.Sum256(bin)
	if !bytes.Equal(tr[12:44], sum[:]) {
		t.Errorf("binary_sha256 %x, want %x", tr[12:44], sum)
	}
	if !bytes.Equal(tr[44:56], make([]byte, 12)) {
		t.Errorf("reserved bytes % x, want zeros", tr[44:56])
	}
	if !bytes.Equal(tr[56:64], []byte{0x41, 0x46, 0x42, 0x4E, 0x44, 0x4C, 0x30, 0x31}) {
		t.Errorf("magic % x", tr[56:64])
	}

	// The metadata is a YAML mapping a generic decoder agrees with.
	var generic map[string]any
	if err := yaml.Unmarshal(meta, &generic); err != nil {
		t.Fatalf("metadata is not YAML: %v\n%s", err, meta)
	}
	dig := generic["digests"].(map[string]any)
	if dig["integrity"] != hex.EncodeToString(sum[:]) {
		t.Errorf("digests.integrity %v, want %x", dig["integrity"], sum)
	}
	if c, _ := dig["cache"].(string); len(c) != 64 {
		t.Errorf("digests.cache %q, want 64 hex chars", c)
	}
	if generic["source"] != "bundle.yaml" {
		t.Errorf("source %v", generic["source"])
	}
	tasks := generic["dags"].(map[string]any)["123"].(map[string]any)["tasks"].([]any)
	if !reflect.DeepEqual(tasks, []any{"true", "yes", "2026-01-01"}) {
		t.Errorf("task ids did not stay strings: %#v", tasks)
	}

	// Read agrees with what Pack returned.
	rb, err := Read(out)
	if err != nil {
		t.Fatal(err)
	}
	if rb.SourceStart != int64(len(bin)) || rb.SourceSize() != int64(len(src)) || rb.MetadataSize() != int64(len(meta)) || rb.Size != int64(len(data)) {
		t.Errorf("regions: binary %d source %d metadata %d size %d", rb.BinarySize(), rb.SourceSize(), rb.MetadataSize(), rb.Size)
	}
	if !reflect.DeepEqual(rb.Manifest, got.Manifest) {
		t.Errorf("read manifest differs from packed one:\n%#v\n%#v", rb.Manifest, got.Manifest)
	}
	if !bytes.Equal(rb.Source, src) || !bytes.Equal(rb.Metadata, meta) {
		t.Error("Read returned different source or metadata bytes")
	}
	if rb.Trailer != got.Trailer {
		t.Errorf("trailer %+v, want %+v", rb.Trailer, got.Trailer)
	}
}

func TestPackIsDeterministic(t *testing.T) {
	binPath := writeTemp(t, "exe", fakeBinary(1000))
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, p := range []string{a, b} {
		if _, err := Pack(p, binPath, []byte("src"), sampleManifest()); err != nil {
			t.Fatal(err)
		}
	}
	da, _ := os.ReadFile(a)
	db, _ := os.ReadFile(b)
	if !bytes.Equal(da, db) {
		t.Error("packing the same input twice gave different bytes")
	}
}

func TestPackEmptySource(t *testing.T) {
	binPath := writeTemp(t, "exe", fakeBinary(10))
	out := filepath.Join(t.TempDir(), "b")
	if _, err := Pack(out, binPath, nil, sampleManifest()); err != nil {
		t.Fatal(err)
	}
	b, err := Read(out)
	if err != nil {
		t.Fatal(err)
	}
	if b.SourceSize() != 0 || b.BinarySize() != 10 {
		t.Errorf("source %d binary %d", b.SourceSize(), b.BinarySize())
	}
}

func TestPackRefuses(t *testing.T) {
	binPath := writeTemp(t, "exe", fakeBinary(100))
	bundle := writeTemp(t, "bundle", assemble(fakeBinary(100), nil, []byte(goodMeta)))
	noSchema := sampleManifest()
	noSchema.SDK.SupervisorSchemaVersion = ""
	noDags := sampleManifest()
	noDags.Dags = nil
	cases := []struct {
		name, out, bin string
		m              Manifest
		want           string
		is             error
	}{
		{"already a bundle", "", bundle, sampleManifest(), "ends in an AFBNDL01 footer", ErrAlreadyBundle},
		{"output is the executable", binPath, binPath, sampleManifest(), "is the executable itself", nil},
		{"no schema version", "", binPath, noSchema, "supervisor_schema_version", nil},
		{"no dags", "", binPath, noDags, "no dags", nil},
		{"missing executable", "", filepath.Join(t.TempDir(), "nope"), sampleManifest(), "no such file", nil},
		{"empty executable", "", writeTemp(t, "empty", nil), sampleManifest(), "is empty", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := c.out
			if out == "" {
				out = filepath.Join(t.TempDir(), "out")
			}
			before, _ := os.ReadFile(c.bin)
			_, err := Pack(out, c.bin, nil, c.m)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error %v does not wrap %v", err, c.is)
			}
			if out != c.bin {
				if _, err := os.Stat(out); !os.IsNotExist(err) {
					t.Errorf("a refused pack left %s behind", out)
				}
			}
			if after, _ := os.ReadFile(c.bin); !bytes.Equal(before, after) {
				t.Error("a refused pack changed the executable")
			}
		})
	}
}

func TestReadCorrupt(t *testing.T) {
	bin := fakeBinary(5000)
	good := assemble(bin, []byte("source"), []byte(goodMeta))
	mutate := func(f func(b []byte) []byte) []byte {
		return f(append([]byte(nil), good...))
	}
	setU32 := func(off int, v uint32) []byte {
		return mutate(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[len(b)-64+off:], v)
			return b
		})
	}
	withMeta := func(meta string) []byte { return assemble(bin, nil, []byte(meta)) }
	cases := []struct {
		name string
		data []byte
		is   error
		want string
	}{
		{"shorter than a trailer", good[:40], ErrNoFooter, "shorter than the 64-byte trailer"},
		{"shorter, says what to do", good[:40], ErrNoFooter, "make one with airflow-go-worker pack"},
		{"truncated", good[:len(good)-100], ErrNoFooter, "not the magic"},
		{"junk appended", append(append([]byte(nil), good...), "junk\n"...), ErrNoFooter, "cut from or appended to its end"},
		{"bad magic", mutate(func(b []byte) []byte { b[len(b)-1] = '2'; return b }), ErrNoFooter, `"AFBNDL02", not the magic`},
		{"footer version 2", setU32(8, 2), ErrCorrupt, "footer version 2, want 1"},
		{"reserved bytes", mutate(func(b []byte) []byte { b[len(b)-64+50] = 7; return b }), ErrCorrupt, "reserved bytes 44..55 of the trailer are not zero"},
		{"hash mismatch", mutate(func(b []byte) []byte { b[10] ^= 0xff; return b }), ErrCorrupt, "binary SHA-256 mismatch: trailer says"},
		{"metadata overflows", setU32(4, uint32(len(good))), ErrCorrupt, "bytes of metadata but only"},
		{"source overflows", setU32(0, uint32(len(good))), ErrCorrupt, "bytes more than the file holds"},
		{"empty binary region", setU32(0, uint32(len(bin)+len("source"))), ErrCorrupt, "binary region is empty"},
		{"metadata not a mapping", withMeta("- a\n- b\n"), ErrCorrupt, "metadata is a YAML list, not a mapping"},
		{"metadata a string", withMeta("just text"), ErrCorrupt, "metadata is a YAML string, not a mapping"},
		{"metadata empty", withMeta(""), ErrCorrupt, "metadata is empty"},
		{"metadata not YAML", withMeta("a: [b\n"), ErrCorrupt, "not valid YAML"},
		{"metadata not UTF-8", withMeta("a: \"\xff\"\n"), ErrCorrupt, "not valid UTF-8"},
		{"unsafe tag", withMeta(strings.Replace(goodMeta, `"v1"`, `!!python/object:os.system "v1"`, 1)), ErrCorrupt, "not one yaml.safe_load accepts"},
		{"no sdk", withMeta("dags: {a: {tasks: [x]}}\n"), ErrCorrupt, "no sdk mapping"},
		{"missing schema version", withMeta(strings.Replace(goodMeta, `  supervisor_schema_version: "2026-10-30"`+"\n", "", 1)), ErrCorrupt, "supervisor_schema_version is missing or empty"},
		{"empty schema version", withMeta(strings.Replace(goodMeta, `"2026-10-30"`, `""`, 1)), ErrCorrupt, "supervisor_schema_version is missing or empty"},
		{"schema version is a date", withMeta(strings.Replace(goodMeta, `"2026-10-30"`, `2026-10-30`, 1)), ErrCorrupt, "is a YAML !!timestamp, not a string"},
		{"no dags", withMeta(strings.Split(goodMeta, "dags:")[0]), ErrCorrupt, "no dags mapping"},
		{"dags a list", withMeta(strings.Split(goodMeta, "dags:")[0] + "dags: [a]\n"), ErrCorrupt, "dags is a YAML list"},
		{"integer dag id", withMeta(strings.Split(goodMeta, "dags:")[0] + "dags: {123: {tasks: [a]}}\n"), ErrCorrupt, "dag id 123 is a YAML !!int"},
		{"integrity disagrees", withMeta(goodMeta + "digests: {integrity: \"00\"}\n"), ErrCorrupt, "digests.integrity in the manifest is 00"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadFrom(bytes.NewReader(c.data), int64(len(c.data)))
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, c.is) {
				t.Errorf("error %v does not wrap %v", err, c.is)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
		})
	}
	if _, err := ReadFrom(bytes.NewReader(good), int64(len(good))); err != nil {
		t.Fatalf("the uncorrupted bundle fails: %v", err)
	}
}

func TestReadErrorNamesFile(t *testing.T) {
	p := writeTemp(t, "b", []byte("not a bundle at all, but long enough to hold a trailer: ................"))
	_, err := Read(p)
	if err == nil || !strings.HasPrefix(err.Error(), p+": ") || !errors.Is(err, ErrNoFooter) {
		t.Fatalf("error %v, want it to start with the path and wrap ErrNoFooter", err)
	}
	if _, err := Read(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("reading a directory: %v", err)
	}
}

func TestReadSource(t *testing.T) {
	binPath := writeTemp(t, "exe", fakeBinary(100))
	out := filepath.Join(t.TempDir(), "b")
	if _, err := Pack(out, binPath, []byte("tasks: []\n"), sampleManifest()); err != nil {
		t.Fatal(err)
	}
	src, name, ok, err := ReadSource(out)
	if err != nil || !ok || string(src) != "tasks: []\n" || name != "bundle.yaml" {
		t.Fatalf("ReadSource = %q, %q, %v, %v", src, name, ok, err)
	}
	src, name, ok, err = ReadSource(binPath)
	if err != nil || ok || src != nil || name != "" {
		t.Fatalf("plain executable: ReadSource = %q, %q, %v, %v; want not ok and no error", src, name, ok, err)
	}
	bad := writeTemp(t, "bad", func() []byte {
		b := assemble(fakeBinary(100), nil, []byte(goodMeta))
		b[len(b)-64+8] = 9
		return b
	}())
	if _, _, _, err := ReadSource(bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt footer: err %v, want ErrCorrupt", err)
	}
}

func TestHasFooter(t *testing.T) {
	yes := writeTemp(t, "b", assemble(fakeBinary(10), nil, []byte(goodMeta)))
	no := writeTemp(t, "e", fakeBinary(1000))
	short := writeTemp(t, "s", []byte("AFBNDL01"))
	for p, want := range map[string]bool{yes: true, no: false, short: false} {
		if got, err := HasFooter(p); err != nil || got != want {
			t.Errorf("HasFooter(%s) = %v, %v; want %v", filepath.Base(p), got, err, want)
		}
	}
}

// TestPackAndReadStreamTheBinary checks that neither Pack nor Read holds the
// executable in memory: allocations stay far below its size.
func TestPackAndReadStreamTheBinary(t *testing.T) {
	const size = 48 << 20
	bin := filepath.Join(t.TempDir(), "exe")
	f, err := os.Create(bin)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0x7f, 'E', 'L', 'F'})
	if err := f.Truncate(size); err != nil { // sparse: cheap to create
		t.Fatal(err)
	}
	f.Close()
	out := filepath.Join(t.TempDir(), "bundle")

	allocated := func(fn func()) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		fn()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	if n := allocated(func() {
		if _, err := Pack(out, bin, []byte("src"), sampleManifest()); err != nil {
			t.Fatal(err)
		}
	}); n > 8<<20 {
		t.Errorf("Pack of a %d MiB executable allocated %d MiB", size>>20, n>>20)
	}
	if n := allocated(func() {
		if _, err := Read(out); err != nil {
			t.Fatal(err)
		}
	}); n > 8<<20 {
		t.Errorf("Read of a %d MiB bundle allocated %d MiB", size>>20, n>>20)
	}
}
