// Package makebuild builds Go binaries the way `make build` does, for the
// tests and benchmarks that run them: statically (CGO_ENABLED=0), with
// -trimpath and the build tags of the extras asked for (none: the default
// build). A figure then measures the binary its row names: with cgo,
// package net alone makes a binary load libc through the dynamic linker at
// every start.
package makebuild

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Build is one go build.
type Build struct {
	Pkg   string   // the package, as go build takes it
	Tags  []string // build tags; none for the default build
	Flags []string // more go build flags, such as -ldflags
	Cgo   bool     // CGO_ENABLED=1 instead: only to measure what cgo costs
	Dir   string   // where go build runs; empty: the current directory
	Env   []string // more environment for go build
}

// To builds into out and returns go's output with the error if it fails.
//
// The binary is then written to out again as an ordinary file, as `pack`
// writes the bundle Airflow runs (and a copy into place writes a
// deployment): the linker writes its output through a memory map, and on
// Linux 6.18 a file written that way starts measurably slower than the
// same bytes written with write(2) (a ping task about 13% more CPU,
// interleaved pairs), which no deployed bundle pays.
func (b Build) To(out string) error {
	linked := out + ".link"
	args := []string{"build", "-trimpath", "-buildvcs=auto", "-o", linked}
	if len(b.Tags) > 0 {
		args = append(args, "-tags", strings.Join(b.Tags, ","))
	}
	cmd := exec.Command("go", append(append(args, b.Flags...), b.Pkg)...)
	cgo := "0"
	if b.Cgo {
		cgo = "1"
	}
	cmd.Dir = b.Dir
	cmd.Env = append(append(os.Environ(), b.Env...), "CGO_ENABLED="+cgo)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s (CGO_ENABLED=%s, tags %q): %v\n%s", b.Pkg, cgo, b.Tags, err, msg)
	}
	defer os.Remove(linked)
	return copyFile(linked, out)
}

// Must is To for a test or benchmark, which fails if the build does.
func (b Build) Must(tb testing.TB, out string) {
	tb.Helper()
	if err := b.To(out); err != nil {
		tb.Fatal(err)
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	// 1 MiB write(2)s, as pack writes (no copy_file_range).
	if _, err := io.CopyBuffer(struct{ io.Writer }{out}, struct{ io.Reader }{in}, make([]byte, 1<<20)); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
