package footer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Bundle is a validated bundle: where each region lies, the trailer, the
// parsed manifest and the source bytes.
type Bundle struct {
	Path          string // "" when read with ReadFrom
	Size          int64
	SourceStart   int64 // also the size of the binary region
	MetadataStart int64
	TrailerStart  int64
	Trailer       Trailer
	Manifest      Manifest
	Metadata      []byte // the manifest exactly as stored
	Source        []byte
}

// BinarySize is the size of the executable region [0, SourceStart).
func (b *Bundle) BinarySize() int64 { return b.SourceStart }

// SourceSize is the size of the source region.
func (b *Bundle) SourceSize() int64 { return b.MetadataStart - b.SourceStart }

// MetadataSize is the size of the manifest region.
func (b *Bundle) MetadataSize() int64 { return b.TrailerStart - b.MetadataStart }

// regions is where the trailer says the regions are, checked against the
// file size.
type regions struct {
	trailer                                  Trailer
	sourceStart, metadataStart, trailerStart int64
}

func locate(r io.ReaderAt, size int64) (regions, error) {
	var g regions
	if size < TrailerSize {
		return g, fmt.Errorf("%w: the file is %d bytes, shorter than the %d-byte trailer (this is not a bundle; make one with airflow-go-worker pack)", ErrNoFooter, size, TrailerSize)
	}
	buf := make([]byte, TrailerSize)
	if _, err := r.ReadAt(buf, size-TrailerSize); err != nil {
		return g, fmt.Errorf("reading the trailer: %w", err)
	}
	t, err := ParseTrailer(buf)
	if err != nil {
		return g, err
	}
	g.trailer = t
	g.trailerStart = size - TrailerSize
	g.metadataStart = g.trailerStart - int64(t.MetadataLen)
	if g.metadataStart < 0 {
		return g, fmt.Errorf("%w: the trailer declares %d bytes of metadata but only %d bytes precede the trailer (the file is truncated or the trailer is damaged)", ErrCorrupt, t.MetadataLen, g.trailerStart)
	}
	g.sourceStart = g.metadataStart - int64(t.SourceLen)
	if g.sourceStart < 0 {
		return g, fmt.Errorf("%w: the trailer declares %d bytes of source and %d of metadata, %d bytes more than the file holds before the trailer (the file is truncated or the trailer is damaged)", ErrCorrupt, t.SourceLen, t.MetadataLen, -g.sourceStart)
	}
	if g.sourceStart == 0 {
		return g, fmt.Errorf("%w: the binary region is empty (source and metadata fill the whole file); a bundle must start with the executable", ErrCorrupt)
	}
	return g, nil
}

// ReadFrom validates the bundle in r (size bytes long) exactly as Airflow's
// coordinator does, in the same order: trailer magic, footer version,
// reserved bytes, region bounds, SHA-256 of the binary region, then the
// manifest. A file without the magic gives an error wrapping ErrNoFooter; any
// other failure wraps ErrCorrupt.
func ReadFrom(r io.ReaderAt, size int64) (*Bundle, error) {
	g, err := locate(r, size)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	buf := make([]byte, 1<<20)
	if _, err := io.CopyBuffer(h, io.NewSectionReader(r, 0, g.sourceStart), buf); err != nil {
		return nil, fmt.Errorf("hashing the binary region: %w", err)
	}
	var got [32]byte
	h.Sum(got[:0])
	if got != g.trailer.BinarySHA256 {
		return nil, fmt.Errorf("%w: binary SHA-256 mismatch: trailer says %x, file hashes to %x (the binary was modified after packing; pack it again)", ErrCorrupt, g.trailer.BinarySHA256, got)
	}
	meta, err := readMetadata(r, g)
	if err != nil {
		return nil, err
	}
	m, err := ParseManifest(meta)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if m.Digests.Integrity != "" && !strings.EqualFold(m.Digests.Integrity, hex.EncodeToString(got[:])) {
		return nil, fmt.Errorf("%w: digests.integrity in the manifest is %s but the binary hashes to %x; pack it again", ErrCorrupt, m.Digests.Integrity, got)
	}
	src, err := readRegion(r, g.sourceStart, g.metadataStart, "source")
	if err != nil {
		return nil, err
	}
	return &Bundle{
		Size: size, SourceStart: g.sourceStart, MetadataStart: g.metadataStart, TrailerStart: g.trailerStart,
		Trailer: g.trailer, Manifest: m, Metadata: meta, Source: src,
	}, nil
}

// readMetadata reads the metadata region, refusing one larger than any
// manifest may be before allocating it.
func readMetadata(r io.ReaderAt, g regions) ([]byte, error) {
	if n := g.trailerStart - g.metadataStart; n > MaxManifestSize {
		return nil, fmt.Errorf("%w: the metadata region is %d bytes, over the %d-byte limit of a manifest (the trailer is damaged, or the bundle was not made by airflow-go-worker pack)", ErrCorrupt, n, MaxManifestSize)
	}
	return readRegion(r, g.metadataStart, g.trailerStart, "metadata")
}

func readRegion(r io.ReaderAt, start, end int64, name string) ([]byte, error) {
	b := make([]byte, end-start)
	if _, err := r.ReadAt(b, start); err != nil && !(errors.Is(err, io.EOF) && len(b) == 0) {
		return nil, fmt.Errorf("reading the %s region: %w", name, err)
	}
	return b, nil
}

// Read opens and validates the bundle at path (see ReadFrom). Errors start
// with the path.
func Read(path string) (*Bundle, error) {
	f, size, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := ReadFrom(f, size)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	b.Path = path
	return b, nil
}

// ReadSource returns the source region of the bundle at path and its display
// name (the manifest's source), for an executable reading its own embedded
// configuration at start-up. It skips the binary hash: Airflow verified it
// before launching, and re-hashing a large binary on every task start is
// wasted time. A file without a footer gives ok=false and no error.
func ReadSource(path string) (source []byte, sourceName string, ok bool, err error) {
	m, src, ok, err := readUnhashed(path, true)
	return src, m.Source, ok, err
}

// ReadManifest returns the manifest of the bundle at path without hashing
// the binary, for an executable reading its own declarations (such as its
// supervisor schema version) at start-up. A file without a footer gives
// ok=false and no error.
func ReadManifest(path string) (m Manifest, ok bool, err error) {
	m, _, ok, err = readUnhashed(path, false)
	return m, ok, err
}

func readUnhashed(path string, withSource bool) (m Manifest, source []byte, ok bool, err error) {
	f, size, err := openRegular(path)
	if err != nil {
		return m, nil, false, err
	}
	defer f.Close()
	g, err := locate(f, size)
	if errors.Is(err, ErrNoFooter) {
		return m, nil, false, nil
	}
	if err != nil {
		return m, nil, false, fmt.Errorf("%s: %w", path, err)
	}
	meta, err := readMetadata(f, g)
	if err != nil {
		return m, nil, false, fmt.Errorf("%s: %w", path, err)
	}
	if m, err = DecodeManifest(meta); err != nil {
		return m, nil, false, fmt.Errorf("%s: %w: %v", path, ErrCorrupt, err)
	}
	if withSource {
		if source, err = readRegion(f, g.sourceStart, g.metadataStart, "source"); err != nil {
			return m, nil, false, fmt.Errorf("%s: %w", path, err)
		}
	}
	return m, source, true, nil
}

// HasFooter reports whether the file at path ends in the AFBNDL01 magic,
// which is how the coordinator tells a bundle from any other file.
func HasFooter(path string) (bool, error) {
	f, size, err := openRegular(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	return hasFooter(f, size)
}

func hasFooter(r io.ReaderAt, size int64) (bool, error) {
	if size < TrailerSize {
		return false, nil
	}
	magic := make([]byte, len(Magic))
	if _, err := r.ReadAt(magic, size-int64(len(Magic))); err != nil {
		return false, fmt.Errorf("reading the last %d bytes: %w", len(Magic), err)
	}
	return bytes.Equal(magic, []byte(Magic)), nil
}

func openRegular(path string) (*os.File, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s is not a regular file (mode %s)", path, st.Mode())
	}
	return f, st.Size(), nil
}

// CacheDigestMatches recomputes digests.cache (spec 2.3) over this bundle's
// binary hash, source region and manifest. known is false when the manifest
// carries no cache digest. The coordinator checks only the binary's hash, so
// this is how a changed source region or manifest shows up. A bundle packed
// by another tool may render its manifest differently and so not match.
func (b *Bundle) CacheDigestMatches() (ok, known bool, err error) {
	if b.Manifest.Digests.Cache == "" {
		return false, false, nil
	}
	bare := b.Manifest
	bare.Digests = Digests{}
	rendered, err := bare.Render()
	if err != nil {
		return false, true, fmt.Errorf("rendering the manifest: %w", err)
	}
	return cacheDigest(b.Trailer.BinarySHA256, b.Source, rendered) == b.Manifest.Digests.Cache, true, nil
}
