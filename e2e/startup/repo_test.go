package startup_test

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A build output committed by mistake (a 12 MiB `demo` from `go build
// ./examples/demo` once sat at the root) bloats every clone for good and
// goes stale at the next change. Builds go to bin/ or dist/, which are
// ignored; this fails for any tracked file outside a testdata/ directory
// that is an executable or another binary.
func TestNoBuildOutputIsTracked(t *testing.T) {
	root := moduleRoot(t)
	files := trackedFiles(t, root)
	if !slices.Contains(files, "go.mod") {
		t.Fatalf("git ls-files lists no go.mod among %d files: the check below would prove nothing", len(files))
	}
	for _, name := range files {
		if inTestdata(name) {
			continue
		}
		if kind := binaryKind(t, filepath.Join(root, name)); kind != "" {
			t.Errorf("%s is tracked but is %s: build into bin/ or dist/ (ignored), `git rm --cached %s`, and add it to .gitignore; data a test needs goes under a testdata/ directory", name, kind, name)
		}
	}
}

// trackedFiles lists the files git tracks in the module, relative to root.
func trackedFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files in %s: %v (this test needs the git checkout)", root, err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" {
			continue
		}
		if _, err := os.Lstat(filepath.Join(root, f)); err != nil {
			continue // deleted in the work tree, not yet committed
		}
		files = append(files, f)
	}
	return files
}

func inTestdata(name string) bool {
	return slices.Contains(strings.Split(filepath.ToSlash(name), "/"), "testdata")
}

// binaryKind names what a file is when it is binary ("" for text): a NUL
// byte in its first 8000 bytes, git's own test, and executables named by
// their magic bytes.
func binaryKind(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := make([]byte, 8000)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		t.Fatal(err)
	}
	head = head[:n]
	if bytes.IndexByte(head, 0) < 0 {
		return "" // every executable format holds NUL bytes early on
	}
	for _, m := range []struct{ magic, kind string }{
		{"\x7fELF", "an ELF executable or object"},
		{"\xcf\xfa\xed\xfe", "a Mach-O executable"},
		{"\xca\xfe\xba\xbe", "a Mach-O universal executable or Java class"},
		{"MZ", "a Windows executable"},
		{"!<arch>\n", "an archive (a Go .a or a .deb)"},
		{"\x00asm", "a WebAssembly module"},
	} {
		if bytes.HasPrefix(head, []byte(m.magic)) {
			return m.kind
		}
	}
	return "a binary file (it holds NUL bytes)"
}

// The repository is read on its own: a comment or page that sends the
// reader to a file outside it (the development machine's shared notes once
// were named from `go doc ./bundles`) is a dead end. What such a reference
// pointed to belongs in docs/, and "spec N.N" in a comment names a section
// of docs/protocol.md, which must exist.
func TestReferencesStayInTheRepository(t *testing.T) {
	root := moduleRoot(t)
	outside := []string{
		"shared" + "/", // a path into the notes beside the checkout
		"airflow-coordinator-protocol" + ".md", "python-provider-interop" + ".md",
		"opensandbox-api" + ".md", "modal-go-sdk" + ".md",
	}
	protocol, err := os.ReadFile(filepath.Join(root, "docs", "protocol.md"))
	if err != nil {
		t.Fatalf("docs/protocol.md, which \"spec N.N\" comments cite: %v", err)
	}
	checked := 0
	for _, name := range trackedFiles(t, root) {
		if !strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, ".md") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for i, line := range strings.Split(string(data), "\n") {
			for _, ref := range outside {
				if strings.Contains(line, ref) {
					t.Errorf("%s:%d names %q, outside the repository: put what the reader needs into docs/ and point there\n\t%s", name, i+1, ref, strings.TrimSpace(line))
				}
			}
			if !strings.HasSuffix(name, ".go") {
				continue
			}
			for _, sec := range specSections(line) {
				if !bytes.Contains(protocol, []byte("\n### "+sec+" ")) {
					t.Errorf("%s:%d cites spec %s, which docs/protocol.md has no section \"### %s ...\" for: add it, or cite the section that says it", name, i+1, sec, sec)
				}
			}
		}
	}
	if checked < 100 {
		t.Fatalf("only %d .go and .md files checked: the check above proves little", checked)
	}
}

// specSections lists the N.N of every "spec N.N" on a line.
func specSections(line string) []string {
	var out []string
	for rest := line; ; {
		i := strings.Index(rest, "spec ")
		if i < 0 {
			return out
		}
		rest = rest[i+len("spec "):]
		n := 0
		for n < len(rest) && (rest[n] == '.' || rest[n] >= '0' && rest[n] <= '9') {
			n++
		}
		if sec := strings.TrimRight(rest[:n], "."); strings.Count(sec, ".") == 1 && sec[0] != '.' {
			out = append(out, sec)
		}
	}
}

// Every build the README, the docs, the scripts and the messages tell a
// user to run uses -trimpath: without it a binary carries the build
// machine's paths, and a panic's stack in a task log showed them.
func TestBuildCommandsTrimPaths(t *testing.T) {
	root := moduleRoot(t)
	found := 0
	for _, name := range trackedFiles(t, root) {
		base := filepath.Base(name)
		isDoc := strings.HasSuffix(name, ".md") || strings.HasSuffix(name, ".sh") || base == "Makefile" || base == "Dockerfile"
		if !isDoc && (!strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go")) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, cmd := range buildCommands(line) {
				found++
				if !strings.Contains(cmd, "-trimpath") {
					t.Errorf("%s:%d: a build without -trimpath: add it (the binary would carry this machine's paths)\n\t%s", name, i+1, strings.TrimSpace(line))
				}
			}
		}
	}
	if found < 8 {
		t.Fatalf("only %d build commands found: the pattern no longer matches how they are written", found)
	}
}

// buildCommands returns, for each `go build` or `go run` on the line that
// builds something (a flag or a package path follows), the rest of the
// line from there.
func buildCommands(line string) []string {
	var out []string
	for _, verb := range []string{"go build ", "go run ", "$(GO) build "} {
		for rest := line; ; {
			i := strings.Index(rest, verb)
			if i < 0 {
				break
			}
			rest = rest[i+len(verb):]
			arg := strings.TrimLeft(rest, " ")
			if strings.HasPrefix(arg, "-") || strings.HasPrefix(arg, "./") || arg == "." || strings.HasPrefix(arg, ". ") || strings.HasPrefix(arg, ".`") {
				out = append(out, rest)
			}
		}
	}
	return out
}
