package driver

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readAll reads through Read only, hiding WriteTo.
func readAll(r io.Reader) ([]byte, error) { return io.ReadAll(struct{ io.Reader }{r}) }

// copyAll reads through WriteTo, as io.Copy into a file does.
func copyAll(r io.Reader) ([]byte, error) {
	var buf bytes.Buffer
	_, err := r.(io.WriterTo).WriteTo(&buf)
	return buf.Bytes(), err
}

func TestLimitReaderStopsPastTheLimit(t *testing.T) {
	for name, read := range map[string]func(io.Reader) ([]byte, error){"Read": readAll, "WriteTo": copyAll} {
		t.Run(name, func(t *testing.T) {
			// More than asked (a file that grew): ErrTooLarge after max bytes.
			src := io.NopCloser(strings.NewReader("0123456789"))
			got, err := read(LimitReader(src, src, "/f", 4))
			var tl *TooLargeError
			if !errors.As(err, &tl) || !errors.Is(err, ErrTooLarge) || tl.MaxBytes != 4 || string(got) != "0123" {
				t.Fatalf("over the limit: got %q, %v", got, err)
			}
			// Exactly the limit is fine.
			src = io.NopCloser(strings.NewReader("0123"))
			if got, err := read(LimitReader(src, src, "/f", 4)); err != nil || string(got) != "0123" {
				t.Fatalf("exactly max: %q, %v", got, err)
			}
			// No limit.
			src = io.NopCloser(strings.NewReader("0123456789"))
			if got, err := read(LimitReader(src, src, "/f", -1)); err != nil || len(got) != 10 {
				t.Fatalf("no limit: %q, %v", got, err)
			}
		})
	}
}

// An endless source ends in an error, not a hang.
func TestLimitReaderEndsAnEndlessStream(t *testing.T) {
	f, err := os.Open("/dev/zero")
	if err != nil {
		t.Fatal(err)
	}
	r := LimitReader(f, f, "/dev/zero", 1<<20)
	defer r.Close()
	n, err := io.Copy(io.Discard, r)
	if !errors.Is(err, ErrTooLarge) || n != 1<<20 {
		t.Fatalf("copied %d bytes, err %v; want 1 MiB then ErrTooLarge", n, err)
	}
}

// Copying a host file into a file keeps the fast path and the exact bytes.
func TestLimitReaderCopiesFiles(t *testing.T) {
	dir := t.TempDir()
	want := bytes.Repeat([]byte("abc"), 100000)
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, want, 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(filepath.Join(dir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	r := LimitReader(in, in, src, int64(len(want)))
	if _, err := io.Copy(out, r); err != nil {
		t.Fatal(err)
	}
	r.Close()
	out.Close()
	got, _ := os.ReadFile(filepath.Join(dir, "dst"))
	if !bytes.Equal(got, want) {
		t.Fatalf("copied %d bytes, want %d identical", len(got), len(want))
	}
}

// Sandbox.OpenFile wraps the driver's stream again; when the driver already
// enforces the limit the second layer is skipped, and a looser inner limit
// is still tightened.
func TestLimitReaderDoesNotStackOnAnEqualLimit(t *testing.T) {
	src := io.NopCloser(strings.NewReader("0123456789"))
	inner := LimitReader(src, src, "/f", 4)
	if outer := LimitReader(inner, inner, "/f", 4); outer != inner {
		t.Fatal("an equal limit must reuse the inner reader")
	}
	loose := LimitReader(src, src, "/f", 8)
	tight := LimitReader(loose, loose, "/f", 4)
	if tight == loose {
		t.Fatal("a tighter limit must wrap the looser reader")
	}
	if got, err := readAll(tight); !errors.Is(err, ErrTooLarge) || string(got) != "0123" {
		t.Fatalf("tightened: got %q, %v", got, err)
	}
}
