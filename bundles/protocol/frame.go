// Package protocol is the comm-socket wire format shared by the bundle runtime
// (package bundles) and the local supervisor (package bundles/supervisor):
// length-prefixed msgpack frames, the [id, body, error] envelope, and the
// tolerant decoding of the messages Airflow's supervisor sends.
//
// See docs/protocol.md, section 3.
package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
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

// DeadlineReader is a stream whose reads can be given a deadline (a
// net.Conn).
type DeadlineReader interface {
	io.Reader
	SetReadDeadline(time.Time) error
}

// ReadFrameWithin is ReadFrame for a stream where frames may be far apart
// but arrive whole: it waits as long as it takes for a frame to start, then
// gives the rest of it (length prefix and payload) `within` to arrive. A
// peer that stops mid-frame is then an error naming it, not a reader
// blocked forever. It leaves the read deadline cleared.
func ReadFrameWithin(r DeadlineReader, within time.Duration) ([]byte, error) {
	var first [1]byte
	if _, err := io.ReadFull(r, first[:]); err != nil {
		return nil, err
	}
	// A deadline the connection cannot take leaves the read unbounded,
	// which the caller's own timeout still ends.
	_ = r.SetReadDeadline(time.Now().Add(within))
	defer func() { _ = r.SetReadDeadline(time.Time{}) }()
	p, err := ReadFrame(io.MultiReader(bytes.NewReader(first[:]), r))
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, fmt.Errorf("the peer stopped sending in the middle of a frame: the rest did not arrive within %s (%w)", within, err)
	}
	return p, err
}
