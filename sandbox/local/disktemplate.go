package local

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Formatting an image runs mkfs.ext4 (a process, about 4 ms of CPU, and an
// fsync that waits for the host's disk), at every create. Every image a
// root's sandboxes get from one driver configuration is the same freshly
// formatted filesystem, so the first create formats one and keeps a copy
// in the root (templateName); later creates, by any worker process using
// the root, copy its data blocks (under 1 MiB: the superblocks, group
// descriptors and bitmaps; the rest is a hole) into a new sparse file.
// The copies share the template's filesystem UUID, which nothing here
// tells filesystems apart by (each is mounted by its loop device).
// Keeping mkfs.ext4's own checks, a copy is made only from an image mkfs
// made, never edited; one that fails to mount drops the template, and the
// next create formats anew.

// templatePrefix starts every template's name in the root.
const templatePrefix = ".disk-template-"

// templateName names the template for lim, formatted for this worker's
// uid and gid (the filesystem root's owner).
func templateName(lim limits) string {
	return fmt.Sprintf("%sv1-%dm-%di-%d-%d.img", templatePrefix, lim.DiskMiB, lim.DiskInodes, os.Getuid(), os.Getgid())
}

// formatImage makes img, a formatted filesystem for lim: a copy of the
// root's template (copied true), else formatted by mkfs.ext4, which then
// becomes the template.
func (d *Driver) formatImage(img string, lim limits) (copied bool, err error) {
	tmpl := filepath.Join(d.root, templateName(lim))
	err = copySparse(tmpl, img, imageBytes(lim))
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		d.log.Warn("cannot copy the sandbox disk template; formatting the image instead", "template", tmpl, "error", err)
		os.Remove(img)
	}
	if err := d.mkfsImage(img, lim); err != nil {
		return false, err
	}
	d.keepTemplate(img, tmpl, lim)
	return false, nil
}

// keepTemplate saves a copy of img, freshly formatted and not yet
// mounted, as the template tmpl: copied to a name beside img (inside the
// sandbox being made, which a crash leaves for the leftover cleanup) and
// renamed into place, so a template is whole or absent.
func (d *Driver) keepTemplate(img, tmpl string, lim limits) {
	tmp := img + ".template"
	if err := copySparse(img, tmp, imageBytes(lim)); err != nil {
		os.Remove(tmp)
		d.log.Debug("cannot keep a sandbox disk template; the next create formats its own", "error", err)
		return
	}
	if err := os.Rename(tmp, tmpl); err != nil {
		os.Remove(tmp)
		d.log.Debug("cannot keep a sandbox disk template; the next create formats its own", "error", err)
	}
}

// dropTemplate removes the template for lim, after a copy of it failed to
// mount.
func (d *Driver) dropTemplate(lim limits) {
	tmpl := filepath.Join(d.root, templateName(lim))
	if err := os.Remove(tmpl); err == nil {
		d.log.Warn("a copy of the sandbox disk template did not mount; the template is removed and the next create formats a new one", "template", tmpl)
	}
}

// isTemplate reports whether name (in the root) is a disk template.
func isTemplate(name string) bool { return strings.HasPrefix(name, templatePrefix) }

// copySparse creates dst as a copy of src, which must be size bytes,
// writing only src's data: its holes stay holes.
func copySparse(src, dst string, size int64) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if st, err := in.Stat(); err != nil || !st.Mode().IsRegular() || st.Size() != size {
		return fmt.Errorf("%s is not a %d-byte file (%v)", src, size, err)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	err = copyData(in, out, size)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// copyData copies each data extent of in to the same offset of out, then
// sizes out as in.
func copyData(in, out *os.File, size int64) error {
	for off := int64(0); off < size; {
		start, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return err
		}
		end, err := unix.Seek(int(in.Fd()), start, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if _, err := out.Seek(start, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.Copy(out, io.NewSectionReader(in, start, end-start)); err != nil {
			return err
		}
		off = end
	}
	return out.Truncate(size)
}
