package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// MaxNesting bounds how deeply arrays and maps may nest in one frame. The
// msgpack decoder recurses per level, so without this a 64 MiB frame of
// nested one-element arrays would exhaust the goroutine stack and crash the
// process instead of failing cleanly.
const MaxNesting = 128

// MaxValues bounds how many msgpack values (scalars, arrays, maps, map keys)
// one frame may hold. Decoded, each costs tens of bytes, so 64 MiB of
// one-byte integers would otherwise become gigabytes of []any; 4 Mi values
// is far beyond any real message and still fits comfortably in memory.
const MaxValues = 1 << 22

var errTruncated = errors.New("truncated msgpack value")

// span is the bytes [start, end) of one msgpack value in a frame.
type span struct{ start, end int }

// checkStructure walks one msgpack value without decoding it, iteratively,
// and rejects truncation, trailing bytes, reserved codes and more than
// MaxValues values. A container whose elements would nest deeper than
// MaxNesting is walked over to its end (with one counter, however deep it
// goes) and returned among the cuts, for the caller to refuse or replace.
func checkStructure(b []byte) (cuts []span, err error) {
	w := walker{b: b}
	// pending[i] is how many values are still expected at depth i.
	pending := []uint64{1}
	for len(pending) > 0 {
		top := len(pending) - 1
		if pending[top] == 0 {
			pending = pending[:top]
			continue
		}
		pending[top]--
		start := w.pos
		children, err := w.value()
		switch {
		case err != nil:
			return nil, err
		case children == 0:
		case len(pending) < MaxNesting:
			pending = append(pending, children)
		default:
			if err := w.skip(children); err != nil {
				return nil, err
			}
			cuts = append(cuts, span{start, w.pos})
		}
	}
	if w.pos != len(b) {
		return nil, fmt.Errorf("%d trailing bytes after the msgpack value", len(b)-w.pos)
	}
	return cuts, nil
}

// walker reads msgpack value headers from b, from pos on.
type walker struct {
	b      []byte
	pos    int
	values int
}

// value reads the value at pos, counting it, moves past its own bytes
// (a string's, an ext's), and returns how many values it holds: an array's
// elements, a map's keys and values.
func (w *walker) value() (children uint64, err error) {
	if w.values++; w.values > MaxValues {
		return 0, fmt.Errorf("more than %d msgpack values in one frame", MaxValues)
	}
	if w.pos >= len(w.b) {
		return 0, errTruncated
	}
	c := w.b[w.pos]
	w.pos++
	skip, children, err := w.header(c)
	if err != nil {
		return 0, err
	}
	if skip > uint64(len(w.b)-w.pos) {
		return 0, errTruncated
	}
	w.pos += int(skip)
	// Every child needs at least one byte: reject impossible counts before
	// anything allocates for them.
	if children > uint64(len(w.b)-w.pos) {
		return 0, errTruncated
	}
	return children, nil
}

// skip walks over n values and everything they hold, whatever their depth:
// a count of the values still owed is all it keeps.
func (w *walker) skip(n uint64) error {
	for n > 0 {
		n--
		children, err := w.value()
		if err != nil {
			return err
		}
		n += children
	}
	return nil
}

// header reads what follows code c: how many bytes of its own the value
// has after its length fields (skip), and how many values it holds.
func (w *walker) header(c byte) (skip, children uint64, err error) {
	switch {
	case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
		return 0, 0, nil // fixint, nil, bools: no payload
	case c >= 0x80 && c <= 0x8f:
		return 0, 2 * uint64(c&0x0f), nil
	case c >= 0x90 && c <= 0x9f:
		return 0, uint64(c & 0x0f), nil
	case c >= 0xa0 && c <= 0xbf:
		return uint64(c & 0x1f), 0, nil
	}
	if size, ok := fixedSizes[c]; ok {
		return size, 0, w.checkExt(c)
	}
	n, ok := lengthBytes[c]
	if !ok { // 0xc1 is never used
		return 0, 0, fmt.Errorf("invalid msgpack code 0x%02x at byte %d", c, w.pos-1)
	}
	length, err := w.length(n)
	switch {
	case err != nil:
		return 0, 0, err
	case c == 0xdc || c == 0xdd: // array16, array32
		return 0, length, nil
	case c == 0xde || c == 0xdf: // map16, map32
		return 0, 2 * length, nil
	case c == 0xc7 || c == 0xc8 || c == 0xc9: // ext8, ext16, ext32
		return length + 1, 0, w.checkExt(c)
	}
	return length, 0, nil // str, bin
}

// fixedSizes are the bytes after the code of the values whose size the
// code says: numbers and fixext.
var fixedSizes = map[byte]uint64{
	0xca: 4, 0xce: 4, 0xd2: 4, // float32, uint32, int32
	0xcb: 8, 0xcf: 8, 0xd3: 8, // float64, uint64, int64
	0xcc: 1, 0xd0: 1, 0xcd: 2, 0xd1: 2,
	0xd4: 2, 0xd5: 3, 0xd6: 5, 0xd7: 9, 0xd8: 17, // fixext: type and data
}

// lengthBytes are the sizes of the length fields of the other codes.
var lengthBytes = map[byte]int{
	0xc4: 1, 0xd9: 1, 0xc7: 1, // bin8, str8, ext8
	0xc5: 2, 0xda: 2, 0xc8: 2, 0xdc: 2, 0xde: 2, // bin16, str16, ext16, array16, map16
	0xc6: 4, 0xdb: 4, 0xc9: 4, 0xdd: 4, 0xdf: 4, // bin32, str32, ext32, array32, map32
}

// length reads an n-byte big-endian length field.
func (w *walker) length(n int) (uint64, error) {
	if len(w.b)-w.pos < n {
		return 0, errTruncated
	}
	var v uint64
	switch n {
	case 1:
		v = uint64(w.b[w.pos])
	case 2:
		v = uint64(binary.BigEndian.Uint16(w.b[w.pos:]))
	case 4:
		v = uint64(binary.BigEndian.Uint32(w.b[w.pos:]))
	}
	w.pos += n
	return v, nil
}

// checkExt refuses an ext value (code c, its type byte at pos) of the
// type this package marks a cut with: a peer cannot forge one.
func (w *walker) checkExt(c byte) error {
	isExt := c >= 0xd4 && c <= 0xd8 || c >= 0xc7 && c <= 0xc9
	if isExt && w.pos < len(w.b) && int8(w.b[w.pos]) == tooDeepExt {
		return fmt.Errorf("msgpack ext type %d at byte %d is reserved", tooDeepExt, w.pos)
	}
	return nil
}
