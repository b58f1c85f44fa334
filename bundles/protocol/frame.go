// Package protocol is the comm-socket wire format shared by the bundle runtime
// (package bundles) and the local supervisor (package bundles/supervisor):
// length-prefixed msgpack frames, the [id, body, error] envelope, and the
// tolerant decoding of the messages Airflow's supervisor sends.
//
// See shared/specs/airflow-coordinator-protocol.md, section 3.
package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// MaxFrameSize caps one frame's payload at 64 MiB. Airflow allows up to
// 2^32-1 bytes, but no message this runtime exchanges comes anywhere near
// that; a larger length prefix is almost certainly a desynchronised stream or
// a hostile peer, and honouring it would make us allocate gigabytes.
const MaxFrameSize = 64 << 20

// ErrFrameTooLarge is returned (wrapped) for a length prefix above MaxFrameSize.
var ErrFrameTooLarge = errors.New("frame too large")

// WriteFrame writes the 4-byte big-endian length then payload, in one write
// so concurrent writers serialised by the caller never interleave halves.
func WriteFrame(w io.Writer, payload []byte) error {
	if len(payload) > MaxFrameSize {
		return fmt.Errorf("%w: %d bytes, the cap is %d", ErrFrameTooLarge, len(payload), MaxFrameSize)
	}
	buf := make([]byte, 4+len(payload))
	binary.BigEndian.PutUint32(buf, uint32(len(payload)))
	copy(buf[4:], payload)
	_, err := w.Write(buf)
	return err
}

// ReadFrame reads one frame's payload. It returns io.EOF only when the stream
// ends cleanly on a frame boundary; a stream cut mid-frame is
// io.ErrUnexpectedEOF, so callers can tell a closed peer from a broken one.
func ReadFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrameSize {
		return nil, fmt.Errorf("%w: length prefix says %d bytes, the cap is %d (is the peer speaking this protocol?)", ErrFrameTooLarge, n, MaxFrameSize)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("reading a %d-byte frame: %w", n, err)
	}
	return payload, nil
}
