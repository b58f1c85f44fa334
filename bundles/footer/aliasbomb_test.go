package footer

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// seedInput reads one input of the FuzzManifest seed corpus.
func seedInput(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(string(raw), "\n", 3)
	if len(lines) < 2 || lines[0] != "go test fuzz v1" || !strings.HasPrefix(lines[1], "[]byte(") {
		t.Fatalf("%s is not a go fuzz corpus file", path)
	}
	s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return []byte(s)
}

// Issue 10, hole 8: the alias budget was per value, and task lists had none,
// so a few hundred bytes of manifest expanded to hundreds of megabytes (the
// FuzzManifest stall). One budget now covers the whole document. The bombs
// are kept as FuzzManifest seeds, so `go test` runs them every time.
func TestManifestAliasBombsAreRefused(t *testing.T) {
	seeds, _ := filepath.Glob("testdata/fuzz/FuzzManifest/alias-bomb-*")
	if len(seeds) < 4 {
		t.Fatalf("want the alias-bomb seeds under testdata/fuzz/FuzzManifest, found %v", seeds)
	}
	for _, p := range seeds {
		meta := seedInput(t, p)
		for name, decode := range map[string]func([]byte) (Manifest, error){"ParseManifest": ParseManifest, "DecodeManifest": DecodeManifest} {
			m, err := decode(meta)
			if err == nil {
				out, _ := m.Render()
				t.Errorf("%s: %s accepted a %d-byte manifest that renders to %d bytes", filepath.Base(p), name, len(meta), len(out))
				continue
			}
			if !strings.Contains(err.Error(), "alias") {
				t.Errorf("%s: %s: the error should say aliases are the cause: %v", filepath.Base(p), name, err)
			}
		}
	}
}

// The budget counts only what aliases add: a big manifest written out, and
// the modest sharing yaml.dump produces (&id001 for a list used twice), pass.
func TestManifestBudgetSparesHonestDocuments(t *testing.T) {
	var b strings.Builder
	b.WriteString("sdk: {supervisor_schema_version: \"2026-06-16\"}\ndags:\n")
	for i := range 10_000 {
		fmt.Fprintf(&b, "  \"dag_%d\": {tasks: [\"a\", \"b\", \"c\"]}\n", i)
	}
	m, err := ParseManifest([]byte(b.String()))
	if err != nil || len(m.Dags) != 10_000 {
		t.Fatalf("a 10k-Dag manifest without aliases: %d dags, %v", len(m.Dags), err)
	}
	shared := "sdk: {supervisor_schema_version: \"2026-06-16\"}\ndags:\n  a: {tasks: &id001 [x, y]}\n  b: {tasks: *id001}\nowners: &o {team: data}\nmore: *o\n"
	m, err = ParseManifest([]byte(shared))
	if err != nil || len(m.Dags["b"].Tasks) != 2 {
		t.Fatalf("shared task list: %+v, %v", m.Dags, err)
	}
}
