// Package memwatch measures a process's peak memory while a transfer runs,
// for the bounded-memory checks of tests and benchmarks: the Go heap in use,
// sampled every few milliseconds, and the kernel's resident-set high-water
// mark (VmHWM), reset at Start.
package memwatch

import (
	"bufio"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// Peak is what a Watch saw, in bytes.
type Peak struct {
	// HeapInuse is the highest runtime.MemStats.HeapInuse sampled.
	HeapInuse uint64
	// BaseHeapInuse is HeapInuse when the watch started, after a GC.
	BaseHeapInuse uint64
	// RSS is the process's resident-set high-water mark since Start; 0 when
	// /proc is unavailable.
	RSS uint64
	// BaseRSS is the resident set at Start, after the collection; 0 when
	// /proc is unavailable.
	BaseRSS uint64
}

// HeapGrowth is the peak heap above the baseline.
func (p Peak) HeapGrowth() uint64 {
	if p.HeapInuse < p.BaseHeapInuse {
		return 0
	}
	return p.HeapInuse - p.BaseHeapInuse
}

// RSSGrowth is the resident-set high-water mark above the baseline: unlike
// HeapGrowth it also sees memory outside the Go heap (mapped buffers, the
// runtime's own) and garbage the collector has not yet returned.
func (p Peak) RSSGrowth() uint64 {
	if p.RSS < p.BaseRSS {
		return 0
	}
	return p.RSS - p.BaseRSS
}

// Watch samples until Stop.
type Watch struct {
	stop chan struct{}
	done chan Peak
}

// Start collects garbage and returns what it freed to the kernel (so the
// resident set is not what an earlier transfer in the same process left
// behind), resets the RSS high-water mark and starts sampling.
func Start() *Watch {
	debug.FreeOSMemory()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // resets VmHWM
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	baseRSS := status("VmRSS:")
	w := &Watch{stop: make(chan struct{}), done: make(chan Peak, 1)}
	go func() {
		peak := base
		var ms runtime.MemStats
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-w.stop:
				runtime.ReadMemStats(&ms) // what is held at Stop counts too
				peak = max(peak, ms.HeapInuse)
				w.done <- Peak{HeapInuse: peak, BaseHeapInuse: base, RSS: status("VmHWM:"), BaseRSS: baseRSS}
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// Stop ends sampling and returns the peaks. Call it once.
func (w *Watch) Stop() Peak {
	close(w.stop)
	return <-w.done
}

// status reads a size field of /proc/self/status (VmHWM: the peak resident
// set, VmRSS: the current one) in bytes; 0 if unknown.
func status(field string) uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
