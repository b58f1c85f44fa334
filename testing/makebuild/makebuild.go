// Package makebuild builds Go binaries the way `make build` does:
// statically (CGO_ENABLED=0), with -trimpath and the build tags of the
// extras asked for (none: the default build). Benchmarks use it so that a
// figure measures the binary its row names: with cgo, package net alone
// makes a binary load libc through the dynamic linker at every start.
package makebuild

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Command is `go build` of pkg into out as make build runs it, with tags
// (comma-joined) and any extra flags (such as -ldflags) before pkg.
func Command(out, pkg string, tags []string, extra ...string) *exec.Cmd {
	args := []string{"build", "-trimpath", "-buildvcs=auto", "-o", out}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(append(args, extra...), pkg)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd
}

// Build runs Command and fails tb with go's output if the build fails.
func Build(tb testing.TB, out, pkg string, tags ...string) {
	tb.Helper()
	if b, err := Command(out, pkg, tags).CombinedOutput(); err != nil {
		tb.Fatalf("go build %s (CGO_ENABLED=0, tags %q): %v\n%s", pkg, tags, err, b)
	}
}
