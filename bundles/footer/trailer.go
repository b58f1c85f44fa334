// Package footer reads and writes AFBNDL01 self-contained bundles: a native
// executable followed by a source region, a YAML manifest and a 64-byte
// trailer, the format Airflow's ExecutableCoordinator scans for
// (docs/protocol.md, section 2).
//
// It knows nothing of the coordinator protocol or of tasks: it only lays out
// and validates bytes, and renders the manifest deterministically.
package footer

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Layout constants of the AFBNDL01 trailer (spec 2.2).
const (
	// Magic is the last 8 bytes of every bundle.
	Magic = "AFBNDL01"
	// TrailerSize is the fixed size of the trailer at the end of the file.
	TrailerSize = 64
	// FooterVersion is the only trailer version Airflow accepts.
	FooterVersion = 1
	// MaxRegionSize bounds the source and metadata regions: their lengths are uint32.
	MaxRegionSize = 1<<32 - 1
)

// Byte offsets inside the trailer.
const (
	offSourceLen   = 0
	offMetadataLen = 4
	offVersion     = 8
	offSHA256      = 12
	offReserved    = 44
	offMagic       = 56
)

// noMagicError is ErrNoFooter for a file that does not end in the magic.
// Its message is written only when read: every task process of an unpacked
// binary meets it at start (schema.Declared), and drops it.
type noMagicError [8]byte

func (e noMagicError) Error() string {
	return fmt.Sprintf("%v: the last 8 bytes are %q, not the magic %q (this is not a bundle, or bytes were cut from or appended to its end; make one with airflow-go-worker pack)", ErrNoFooter, e[:], Magic)
}

func (e noMagicError) Unwrap() error { return ErrNoFooter }

// ErrNoFooter means the file does not end in the AFBNDL01 magic: it is not a
// bundle at all (the coordinator silently ignores such files).
var ErrNoFooter = errors.New("no AFBNDL01 footer")

// ErrCorrupt is wrapped by every error about a file that claims to be a bundle
// (it ends in the magic) but breaks the format. The coordinator rejects such
// files; the wrapping error says exactly what is wrong.
var ErrCorrupt = errors.New("corrupt AFBNDL01 bundle")

// Trailer is the decoded 64-byte trailer.
type Trailer struct {
	SourceLen     uint32
	MetadataLen   uint32
	FooterVersion uint32
	BinarySHA256  [32]byte
	Reserved      [12]byte
	Magic         [8]byte
}

// MarshalBinary encodes t as the 64 little-endian trailer bytes.
func (t Trailer) MarshalBinary() ([]byte, error) {
	b := make([]byte, TrailerSize)
	binary.LittleEndian.PutUint32(b[offSourceLen:], t.SourceLen)
	binary.LittleEndian.PutUint32(b[offMetadataLen:], t.MetadataLen)
	binary.LittleEndian.PutUint32(b[offVersion:], t.FooterVersion)
	copy(b[offSHA256:offReserved], t.BinarySHA256[:])
	copy(b[offReserved:offMagic], t.Reserved[:])
	copy(b[offMagic:], t.Magic[:])
	return b, nil
}

// newTrailer builds the trailer a packer writes: version 1, zero reserved
// bytes, the magic.
func newTrailer(sourceLen, metadataLen uint32, sum [32]byte) Trailer {
	t := Trailer{SourceLen: sourceLen, MetadataLen: metadataLen, FooterVersion: FooterVersion, BinarySHA256: sum}
	copy(t.Magic[:], Magic)
	return t
}

// ParseTrailer decodes the last 64 bytes of a file and checks the fields that
// need nothing else from the file: magic, footer version, reserved bytes.
// A wrong magic gives ErrNoFooter; the other checks give ErrCorrupt.
func ParseTrailer(b []byte) (Trailer, error) {
	var t Trailer
	if len(b) != TrailerSize {
		return t, fmt.Errorf("%w: trailer is %d bytes, want %d", ErrCorrupt, len(b), TrailerSize)
	}
	copy(t.Magic[:], b[offMagic:])
	if string(t.Magic[:]) != Magic {
		return t, noMagicError(t.Magic)
	}
	t.SourceLen = binary.LittleEndian.Uint32(b[offSourceLen:])
	t.MetadataLen = binary.LittleEndian.Uint32(b[offMetadataLen:])
	t.FooterVersion = binary.LittleEndian.Uint32(b[offVersion:])
	copy(t.BinarySHA256[:], b[offSHA256:offReserved])
	copy(t.Reserved[:], b[offReserved:offMagic])
	if t.FooterVersion != FooterVersion {
		return t, fmt.Errorf("%w: footer version %d, want %d (this bundle was written by a packer Airflow does not support)", ErrCorrupt, t.FooterVersion, FooterVersion)
	}
	for _, r := range t.Reserved {
		if r != 0 {
			return t, fmt.Errorf("%w: reserved bytes 44..55 of the trailer are not zero (% x)", ErrCorrupt, t.Reserved[:])
		}
	}
	return t, nil
}
