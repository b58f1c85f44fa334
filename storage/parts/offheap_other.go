//go:build !unix

package parts

import "errors"

// offHeap is unavailable here: buffers come from the Go heap.
func offHeap(int) ([]byte, error) { return nil, errors.New("no anonymous mappings on this platform") }
