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

// checkStructure walks one msgpack value without decoding it, iteratively,
// and rejects truncation, trailing bytes, reserved codes and excess nesting.
func checkStructure(b []byte) error {
	// pending[i] is how many values are still expected at depth i.
	pending := []uint64{1}
	pos := 0
	values := 0
	for len(pending) > 0 {
		if pending[len(pending)-1] == 0 {
			pending = pending[:len(pending)-1]
			continue
		}
		pending[len(pending)-1]--
		if values++; values > MaxValues {
			return fmt.Errorf("more than %d msgpack values in one frame", MaxValues)
		}
		if pos >= len(b) {
			return errTruncated
		}
		c := b[pos]
		pos++
		var skip, children uint64
		need := func(n int) (uint64, error) {
			if len(b)-pos < n {
				return 0, errTruncated
			}
			var v uint64
			switch n {
			case 1:
				v = uint64(b[pos])
			case 2:
				v = uint64(binary.BigEndian.Uint16(b[pos:]))
			case 4:
				v = uint64(binary.BigEndian.Uint32(b[pos:]))
			}
			pos += n
			return v, nil
		}
		var err error
		switch {
		case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
			// fixint, nil, bools: no payload
		case c >= 0x80 && c <= 0x8f:
			children = 2 * uint64(c&0x0f)
		case c >= 0x90 && c <= 0x9f:
			children = uint64(c & 0x0f)
		case c >= 0xa0 && c <= 0xbf:
			skip = uint64(c & 0x1f)
		case c == 0xc4, c == 0xd9: // bin8, str8
			skip, err = need(1)
		case c == 0xc5, c == 0xda: // bin16, str16
			skip, err = need(2)
		case c == 0xc6, c == 0xdb: // bin32, str32
			skip, err = need(4)
		case c == 0xc7: // ext8
			skip, err = need(1)
			skip++
		case c == 0xc8: // ext16
			skip, err = need(2)
			skip++
		case c == 0xc9: // ext32
			skip, err = need(4)
			skip++
		case c == 0xca, c == 0xce, c == 0xd2: // float32, uint32, int32
			skip = 4
		case c == 0xcb, c == 0xcf, c == 0xd3: // float64, uint64, int64
			skip = 8
		case c == 0xcc, c == 0xd0:
			skip = 1
		case c == 0xcd, c == 0xd1:
			skip = 2
		case c == 0xd4:
			skip = 2
		case c == 0xd5:
			skip = 3
		case c == 0xd6:
			skip = 5
		case c == 0xd7:
			skip = 9
		case c == 0xd8:
			skip = 17
		case c == 0xdc:
			children, err = need(2)
		case c == 0xdd:
			children, err = need(4)
		case c == 0xde:
			children, err = need(2)
			children *= 2
		case c == 0xdf:
			children, err = need(4)
			children *= 2
		default: // 0xc1 is never used
			return fmt.Errorf("invalid msgpack code 0x%02x at byte %d", c, pos-1)
		}
		if err != nil {
			return err
		}
		if skip > uint64(len(b)-pos) {
			return errTruncated
		}
		pos += int(skip)
		if children > 0 {
			// Every child needs at least one byte: reject impossible counts
			// before anything allocates for them.
			if children > uint64(len(b)-pos) {
				return errTruncated
			}
			if len(pending) >= MaxNesting {
				return fmt.Errorf("msgpack nesting deeper than %d levels", MaxNesting)
			}
			pending = append(pending, children)
		}
	}
	if pos != len(b) {
		return fmt.Errorf("%d trailing bytes after the msgpack value", len(b)-pos)
	}
	return nil
}
