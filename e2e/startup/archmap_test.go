package startup_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The map in docs/ARCHITECTURE.md's "## Layout" is the first thing a new
// reader trusts, so it is checked like code: every package directory of the
// module is an entry (internal ones and test programs too), every entry is
// a package directory (or a directory heading entries below it), and, as
// the section says, a package imports (outside its tests) only packages
// listed below it.
func TestArchitectureMapIsTrue(t *testing.T) {
	root := moduleRoot(t)
	entries := layoutEntries(t, filepath.Join(root, "docs", "ARCHITECTURE.md"))
	index := map[string]int{}
	for i, e := range entries {
		if _, dup := index[e]; dup {
			t.Errorf("docs/ARCHITECTURE.md's map lists %s/ twice: keep one line", e)
		}
		index[e] = i
	}
	dirs := packageDirs(t, root)
	deps := imports(t, root)
	for _, d := range dirs {
		if _, ok := index[d]; !ok {
			t.Errorf("package %s is not in docs/ARCHITECTURE.md's map (## Layout): add a line %q with its job, %s", d, d+"/", placeFor(d, entries, index, deps))
		}
	}
	isPkg := map[string]bool{}
	for _, d := range dirs {
		isPkg[d] = true
	}
	for _, e := range entries {
		if !isPkg[e] && !isHeading(root, e, entries) {
			t.Errorf("docs/ARCHITECTURE.md's map (## Layout) lists %s/, which holds no Go package: remove its line, or rename it to where the package went", e)
		}
	}
	for pkg, imported := range deps {
		i, ok := index[pkg]
		if !ok {
			continue // reported above
		}
		for _, dep := range imported {
			if j, ok := index[dep]; ok && j < i {
				t.Errorf("%s imports %s, which docs/ARCHITECTURE.md's map lists above it: dependencies point down the map, so move %s/ above %s/ (or %s/ below it), or drop the import", pkg, dep, pkg, dep, dep)
			}
		}
	}
}

// isHeading reports whether entry is a directory without Go files that
// heads other entries (testing/, internal/).
func isHeading(root, entry string, entries []string) bool {
	if fi, err := os.Stat(filepath.Join(root, entry)); err != nil || !fi.IsDir() {
		return false
	}
	for _, e := range entries {
		if strings.HasPrefix(e, entry+"/") {
			return true
		}
	}
	return false
}

// moduleRoot is the directory of the module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go env GOMOD: %v %q", err, out)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// layoutEntries reads the package paths of the map: the code block of the
// "## Layout" section, where an entry is a line indented less than the
// descriptions' column whose first word is a path ending in "/";
// "sandbox/local|modal|opensandbox/" is three entries.
func layoutEntries(t *testing.T, doc string) []string {
	t.Helper()
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Layout\n")
	if !ok {
		t.Fatalf("%s has no \"## Layout\" section", doc)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, ok := strings.Cut(section, "\n```\n")
	if !ok {
		t.Fatalf("the Layout section of %s has no code block (the map)", doc)
	}
	block, _, _ = strings.Cut(block, "\n```")
	var entries []string
	for line := range strings.SplitSeq(block, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		fields := strings.Fields(trimmed)
		if len(fields) == 0 || len(line)-len(trimmed) >= 8 || !strings.HasSuffix(fields[0], "/") {
			continue
		}
		path := strings.TrimSuffix(fields[0], "/")
		dir, last := "", path
		if i := strings.LastIndexByte(path, '/'); i >= 0 {
			dir, last = path[:i+1], path[i+1:]
		}
		for alt := range strings.SplitSeq(last, "|") {
			entries = append(entries, dir+alt)
		}
	}
	if len(entries) == 0 {
		t.Fatalf("found no entries in the map of %s", doc)
	}
	return entries
}

// packageDirs lists the module's directories holding Go files, relative to
// root, skipping what the go command skips (testdata, names starting with
// "." or "_") and the build outputs .gitignore names (bin, dist). It walks
// the tree rather than asking go list, which leaves out a package whose
// every file a build tag excludes (e2e/arm64vm).
func packageDirs(t *testing.T, root string) []string {
	t.Helper()
	seen := map[string]bool{}
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || rel == "bin" || rel == "dist") {
				return filepath.SkipDir
			}
			if rel != "." {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // another module
				}
			}
			return nil
		}
		if dir := filepath.ToSlash(filepath.Dir(rel)); strings.HasSuffix(rel, ".go") && dir != "." && !seen[dir] {
			seen[dir] = true
			dirs = append(dirs, dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// imports maps each package directory of the module to the module's
// packages it imports outside its tests, as directories.
func imports(t *testing.T, root string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	m := map[string][]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, ok := strings.CutPrefix(fields[0], module)
		if !ok {
			continue
		}
		m[pkg] = nil
		for _, f := range fields[1:] {
			if dep, ok := strings.CutPrefix(f, module); ok {
				m[pkg] = append(m[pkg], dep)
			}
		}
	}
	return m
}

// placeFor says where in the map a missing package belongs: below every
// entry that imports it and above every entry it imports.
func placeFor(pkg string, entries []string, index map[string]int, deps map[string][]string) string {
	below, above := -1, len(entries)
	for user, ds := range deps {
		for _, d := range ds {
			if i, ok := index[user]; ok && d == pkg && i > below {
				below = i
			}
		}
	}
	for _, d := range deps[pkg] {
		if i, ok := index[d]; ok && i < above {
			above = i
		}
	}
	switch {
	case below >= above:
		return "but " + entries[below] + "/ imports it and it imports " + entries[above] + "/, listed above: reorder those first"
	case below >= 0 && above < len(entries):
		return "below " + entries[below] + "/ and above " + entries[above] + "/"
	case below >= 0:
		return "anywhere below " + entries[below] + "/"
	case above < len(entries):
		return "anywhere above " + entries[above] + "/"
	}
	return "anywhere (it imports no package of the module, and none imports it)"
}

// The map's reader takes entries, not the paths its descriptions mention,
// and expands a line naming sibling packages.
func TestLayoutEntriesReadsTheMap(t *testing.T) {
	doc := filepath.Join(t.TempDir(), "ARCHITECTURE.md")
	text := "# A\n\n## Layout\n\nProse naming not/an/entry/.\n\n```\n" +
		"cmd/x/                   the binary; see storage/s3/ for\n" +
		"                         more/ and more\n" +
		"  sandbox/local|modal/   two backends\n" +
		"```\n\n## Next\n\n```\nother/\n```\n"
	if err := os.WriteFile(doc, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(layoutEntries(t, doc), " ")
	if want := "cmd/x sandbox/local sandbox/modal"; got != want {
		t.Fatalf("entries %q, want %q", got, want)
	}
}
