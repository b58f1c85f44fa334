//go:build unix

package parts

import "syscall"

// offHeap maps size bytes of anonymous memory, which the Go collector
// neither scans nor counts towards its heap goal. Pages become resident
// only when written.
func offHeap(size int) ([]byte, error) {
	return syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
}
