package tailbuf

import (
	"strings"
	"testing"
)

func TestKeepsTheTail(t *testing.T) {
	b := New(10)
	for _, s := range []string{"abc", "defgh", "ijklmn"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("write %q: %d, %v", s, n, err)
		}
	}
	if got := b.String(); got != "efghijklmn" {
		t.Errorf("tail = %q, want efghijklmn", got)
	}
	if !b.Truncated() || b.Total() != 14 {
		t.Errorf("truncated %v total %d", b.Truncated(), b.Total())
	}
}

func TestFitsExactly(t *testing.T) {
	b := New(5)
	b.Write([]byte("12"))
	b.Write([]byte("345"))
	if b.String() != "12345" || b.Truncated() {
		t.Errorf("%q truncated=%v", b.String(), b.Truncated())
	}
	b.Write([]byte("6"))
	if b.String() != "23456" || !b.Truncated() {
		t.Errorf("%q truncated=%v", b.String(), b.Truncated())
	}
}

func TestOneBigWrite(t *testing.T) {
	b := New(4)
	b.Write([]byte(strings.Repeat("x", 100) + "END!"))
	if b.String() != "END!" || !b.Truncated() || b.Total() != 104 {
		t.Errorf("%q truncated=%v total=%d", b.String(), b.Truncated(), b.Total())
	}
	exact := New(4)
	exact.Write([]byte("abcd"))
	if exact.String() != "abcd" || exact.Truncated() {
		t.Errorf("a write of exactly Max bytes: %q truncated=%v", exact.String(), exact.Truncated())
	}
}

func TestZeroMaxKeepsNothing(t *testing.T) {
	b := New(0)
	b.Write([]byte("abc"))
	if b.String() != "" || !b.Truncated() || b.Total() != 3 {
		t.Errorf("%q truncated=%v total=%d", b.String(), b.Truncated(), b.Total())
	}
}
