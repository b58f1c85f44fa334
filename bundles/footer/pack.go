package footer

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ErrAlreadyBundle means the executable given to Pack already ends in an
// AFBNDL01 footer. Packing it again would hash the old footer into the
// binary region; the fix is to pack the plain executable.
var ErrAlreadyBundle = errors.New("the executable is already an AFBNDL01 bundle")

// cacheDigestPrefix starts the digests.cache input (spec 2.3).
const cacheDigestPrefix = "airflow-go-pack cache digest v1\x00"

// Pack writes a bundle to outPath: the executable at binaryPath byte for
// byte, then source, then the manifest m with digests filled in, then the
// trailer. It streams the executable once, hashing while copying, into a
// temp file in outPath's directory, and renames that into place with mode
// 0755, so a reader never sees a half-written bundle.
//
// m.Source should name the source region (a display file name). Any digests
// in m are replaced: they describe the new binary. A non-empty source is
// indexed as one file named m.Source (Sources, EntrypointPath), the Gen C
// source index readers of newer Airflow and its Go SDK use.
func Pack(outPath, binaryPath string, source []byte, m Manifest) (*Bundle, error) {
	if err := checkPackable(m, source); err != nil {
		return nil, err
	}
	bin, binSize, err := openRegular(binaryPath)
	if err != nil {
		return nil, fmt.Errorf("executable: %w", err)
	}
	defer bin.Close()
	if binSize == 0 {
		return nil, fmt.Errorf("executable %s is empty; a bundle must start with a real executable", binaryPath)
	}
	if has, err := hasFooter(bin, binSize); err != nil {
		return nil, fmt.Errorf("executable %s: %w", binaryPath, err)
	} else if has {
		return nil, fmt.Errorf("%w: %s ends in an AFBNDL01 footer; pack the unpacked executable (the output of go build), not a bundle", ErrAlreadyBundle, binaryPath)
	}
	if st, err := os.Stat(outPath); err == nil {
		if bst, _ := bin.Stat(); os.SameFile(st, bst) {
			return nil, fmt.Errorf("output %s is the executable itself; write the bundle to another path", outPath)
		}
	}

	dir := filepath.Dir(outPath)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(outPath)+".*.tmp")
	if err != nil {
		return nil, fmt.Errorf("output: creating a temp file next to %s: %w", outPath, err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()

	h := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(tmp, h), io.NewSectionReader(bin, 0, binSize), make([]byte, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("copying executable %s into %s: %w", binaryPath, tmp.Name(), err)
	}
	var sum [32]byte
	h.Sum(sum[:0])

	m.Sources, m.EntrypointPath = SourceIndex(m.Source, source)
	m.Digests = Digests{Integrity: hex.EncodeToString(sum[:])}
	withoutDigests := m
	withoutDigests.Digests = Digests{}
	bare, err := withoutDigests.Render()
	if err != nil {
		return nil, fmt.Errorf("rendering the manifest: %w", err)
	}
	m.Digests.Cache = cacheDigest(sum, source, bare)
	meta, err := m.Render()
	if err != nil {
		return nil, fmt.Errorf("rendering the manifest: %w", err)
	}
	// What no bundle could start with (every task start reads the
	// manifest, within these bounds) is not packed.
	if err := checkManifestSize(meta); err != nil {
		return nil, fmt.Errorf("the manifest cannot be packed: %w", err)
	}
	t := newTrailer(uint32(len(source)), uint32(len(meta)), sum)
	tb, _ := t.MarshalBinary()
	for _, part := range [][]byte{source, meta, tb} {
		if _, err := tmp.Write(part); err != nil {
			return nil, fmt.Errorf("writing %s: %w", tmp.Name(), err)
		}
	}
	if err := tmp.Chmod(0o755); err != nil {
		return nil, fmt.Errorf("making %s executable: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return nil, fmt.Errorf("flushing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("closing %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), outPath); err != nil {
		os.Remove(tmp.Name())
		done = true
		return nil, fmt.Errorf("moving the bundle into place at %s: %w", outPath, err)
	}
	done = true

	metaStart := n + int64(len(source))
	return &Bundle{
		Path: outPath, Size: metaStart + int64(len(meta)) + TrailerSize,
		SourceStart: n, MetadataStart: metaStart, TrailerStart: metaStart + int64(len(meta)),
		Trailer: t, Manifest: m, Metadata: meta, Source: source,
	}, nil
}

// SourceIndex is the Gen C source index of a source region that holds one
// file, name (spec 2.3): that file at offset 0, and it is the entrypoint.
// An empty region has no index.
func SourceIndex(name string, source []byte) ([]SourceFile, string) {
	if len(source) == 0 {
		return nil, ""
	}
	if name == "" {
		name = "source"
	}
	sum := sha256.Sum256(source)
	return []SourceFile{{Path: name, Offset: 0, Length: int64(len(source)), SHA256: hex.EncodeToString(sum[:])}}, name
}

// CheckSourceIndex checks the manifest's source index against the source
// region as Airflow's Gen C reader does: every entry within the region with
// its SHA-256, paths unique, the entrypoint among them, the region the
// files back to back, the entrypoint first. A bundle without an index
// passes when its region is empty. Airflow 3.3 reads neither.
func (b *Bundle) CheckSourceIndex() error {
	src, idx := b.Source, b.Manifest.Sources
	if len(idx) == 0 {
		if len(src) > 0 {
			return fmt.Errorf("the manifest lists no sources for the %d-byte source region", len(src))
		}
		return nil
	}
	seen := map[string]bool{}
	var next int64
	for i, f := range idx {
		switch {
		case f.Path == "":
			return fmt.Errorf("sources[%d] has no path", i)
		case seen[f.Path]:
			return fmt.Errorf("sources lists %q twice", f.Path)
		case f.Offset < 0 || f.Length < 0 || f.Offset > int64(len(src))-f.Length:
			return fmt.Errorf("source %q (offset %d, length %d) does not fit the %d-byte source region", f.Path, f.Offset, f.Length, len(src))
		case f.Offset != next:
			return fmt.Errorf("source %q starts at %d, not at %d where the file before it ends", f.Path, f.Offset, next)
		}
		seen[f.Path] = true
		next = f.Offset + f.Length
		sum := sha256.Sum256(src[f.Offset:next])
		if got := hex.EncodeToString(sum[:]); got != f.SHA256 {
			return fmt.Errorf("source %q hashes to %s, but the index says %q", f.Path, got, f.SHA256)
		}
	}
	if next != int64(len(src)) {
		return fmt.Errorf("the sources cover %d of the %d-byte source region", next, len(src))
	}
	if b.Manifest.EntrypointPath != idx[0].Path {
		return fmt.Errorf("entrypoint_path %q is not the first of the sources (%q)", b.Manifest.EntrypointPath, idx[0].Path)
	}
	return nil
}

// checkPackable refuses manifests the coordinator would reject, before any
// bytes are written.
func checkPackable(m Manifest, source []byte) error {
	if int64(len(source)) > MaxRegionSize {
		return fmt.Errorf("the source is %d bytes, more than the format's limit of %d", len(source), int64(MaxRegionSize))
	}
	if m.SDK.SupervisorSchemaVersion == "" {
		return errors.New("the manifest has no sdk.supervisor_schema_version; Airflow rejects such bundles")
	}
	if len(m.Dags) == 0 {
		return errors.New("the manifest declares no dags; Airflow would never choose this bundle")
	}
	for id := range m.Dags {
		if id == "" {
			return errors.New("the manifest has an empty dag id")
		}
	}
	return nil
}

// cacheDigest is SHA-256 over the prefix, then the raw SHA-256 of the binary,
// the source and the manifest rendered without digests (spec 2.3, digests.cache).
func cacheDigest(binSum [32]byte, source, bareManifest []byte) string {
	h := sha256.New()
	h.Write([]byte(cacheDigestPrefix))
	h.Write(binSum[:])
	s := sha256.Sum256(source)
	h.Write(s[:])
	b := sha256.Sum256(bareManifest)
	h.Write(b[:])
	return hex.EncodeToString(h.Sum(nil))
}
