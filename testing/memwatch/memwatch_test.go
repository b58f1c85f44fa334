package memwatch

import "testing"

var sink [][]byte

// A 64 MiB allocation held across the watch shows up in the heap peak and
// in the resident-set high-water mark.
func TestWatchSeesAnAllocation(t *testing.T) {
	w := Start()
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = byte(i) // touch every page so it is resident
	}
	sink = append(sink, buf)
	p := w.Stop()
	sink = nil
	if p.HeapGrowth() < 60<<20 {
		t.Fatalf("heap growth %d MiB, want at least 60 MiB", p.HeapGrowth()>>20)
	}
	if p.RSS != 0 && p.RSSGrowth() < 60<<20 {
		t.Fatalf("RSS high-water mark %d MiB above the %d MiB at Start, want at least 60 MiB", p.RSSGrowth()>>20, p.BaseRSS>>20)
	}
}
