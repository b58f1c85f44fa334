package local

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A sandbox's workdir and /tmp live on a filesystem of its own: an ext4
// image of disk_mib, sparse on the host, loop-mounted at <dir>/mnt/<driver>
// by each driver (each worker process) that uses it, and unmounted by its
// Close: a sandbox left behind holds no mount, and a host restart loses
// none. All of a sandbox's mounts share one loop device and so one
// superblock (two would corrupt the image). The
// filesystem itself enforces the limit, so nothing a command does can
// pass it: files unlinked while held open still hold their blocks,
// directories too deep or too closed for a walk from the host still count,
// and the image has a fixed number of inodes. A walk of the directories
// (what the backend did before) missed all four. Mounting needs
// CAP_SYS_ADMIN and the loop devices: a worker without them refuses specs
// rather than run them unbounded, unless the operator turned the limit off
// (DiskLimitEnv).
const (
	diskImage  = "disk.img" // the image, beside meta.json
	diskMounts = "mnt"      // a mount point per driver; work/ and tmp/ lie in each
)

// DefaultBytesPerInode sizes a sandbox's inode table when the bundle
// config sets no disk_inodes: one inode per 16 KiB of disk_mib, as
// mkfs.ext4 does by default (262,144 for the 4096 MiB default).
const DefaultBytesPerInode = 16 << 10

// DiskLimitEnv is the operator's switch for a worker that cannot mount a
// filesystem per sandbox (an unprivileged worker, a container without
// CAP_SYS_ADMIN or loop devices): "off" runs sandboxes without a disk
// limit, their workdir and /tmp plain directories under the sandbox root.
// Unset, such a worker refuses every spec, saying why.
const DiskLimitEnv = "AIRFLOW_GO_WORKER_LOCAL_DISK_LIMIT"

// diskLimitOff reads DiskLimitEnv.
func diskLimitOff() (bool, error) {
	return offSwitch(DiskLimitEnv, "run local sandboxes without a disk limit")
}

// offSwitch reads an operator's switch that turns a limit off: unset is
// on, "off" is off, anything else an error saying what off would do.
func offSwitch(env, offDoes string) (bool, error) {
	switch v := strings.TrimSpace(os.Getenv(env)); v {
	case "":
		return false, nil
	case "off":
		return true, nil
	default:
		return false, fmt.Errorf("%s=%q is not a setting; give off to %s, or leave it unset", env, v, offDoes)
	}
}

// inodesFor is the inode count of a filesystem of diskMiB.
func inodesFor(diskMiB, inodes int) int {
	if inodes > 0 {
		return inodes
	}
	return max(1024, int(int64(diskMiB)<<20/DefaultBytesPerInode))
}

// diskSupport says why this worker cannot mount a filesystem per sandbox,
// nil when it can; mkfs is the mkfs.ext4 to use.
func diskSupport() (mkfs string, err error) {
	if !hasCapSysAdmin() {
		return "", errors.New("the worker lacks CAP_SYS_ADMIN (it runs unprivileged, or in a container without it), so it cannot mount one")
	}
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return "", fmt.Errorf("the loop devices are not available (%v)", err)
	}
	ctl.Close()
	for _, p := range []string{"mkfs.ext4", "/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
		if mkfs, err = exec.LookPath(p); err == nil {
			return mkfs, nil
		}
	}
	return "", errors.New("mkfs.ext4 is not installed (apt-get install e2fsprogs)")
}

// hasCapSysAdmin reads the worker's effective capabilities.
func hasCapSysAdmin() bool {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<unix.CAP_SYS_ADMIN) != 0
		}
	}
	return false
}

// noDiskLimit says why this worker refuses specs.
func (d *Driver) noDiskLimit() error {
	return fmt.Errorf("disk: every local sandbox's workdir and /tmp are limited to disk_mib (%d MiB here) by a filesystem of its own, a loop-mounted ext4 image, and this worker cannot make one: %v; run the worker as root or with CAP_SYS_ADMIN and /dev/loop-control, or have the operator run sandboxes without a disk limit (%s=off)", d.diskMiB, d.diskErr, DiskLimitEnv)
}

// makeDisk creates the image of sandbox directory dir (still being made),
// formatted (a copy of the root's template, see disktemplate.go), and
// mounts it, with work/ and tmp/ in it.
func (d *Driver) makeDisk(dir string, lim limits) error {
	copied, err := d.formatImage(filepath.Join(dir, diskImage), lim)
	if err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(dir, diskMounts), 0o700); err != nil {
		return err
	}
	err = d.mountDisk(dir, true)
	if err != nil && copied {
		d.dropTemplate(lim) // the next create formats its own and keeps that one
	}
	return err
}

// mkfsImage creates img, sized for lim, and formats it.
func (d *Driver) mkfsImage(img string, lim limits) error {
	f, err := os.OpenFile(img, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("cannot create the sandbox's disk image: %v", err)
	}
	// The inode tables come on top of disk_mib, so files get all of it.
	size := imageBytes(lim)
	err = f.Truncate(size) // sparse: host disk is taken as files are written
	f.Close()
	if err != nil {
		return fmt.Errorf("cannot size the sandbox's disk image to %d MiB: %v", size>>20, err)
	}
	// No journal and no reserved blocks: the data lives as long as the
	// sandbox, and every block is the sandbox's. No room kept for growing
	// online (resize_inode): an image never grows, and its reserved group
	// descriptors were 2 MiB of the 2.2 written for the default 4 GiB. A
	// fresh sparse file reads as zeroes, so the inode tables need no
	// zeroing now or later.
	var out bytes.Buffer
	cmd := exec.Command(d.mkfs, "-q", "-F", "-t", "ext4", "-O", "^has_journal,^resize_inode", "-m", "0",
		"-I", strconv.Itoa(inodeSize), "-N", strconv.Itoa(lim.DiskInodes),
		"-E", "assume_storage_prezeroed=1,root_owner="+strconv.Itoa(os.Getuid())+":"+strconv.Itoa(os.Getgid()), img)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = []string{"PATH=" + defaultPath}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cannot format the sandbox's disk image (%s: %v: %s); check that e2fsprogs is installed and working", d.mkfs, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// imageBytes is the size of an image for lim: disk_mib and the inode
// tables on top of it.
func imageBytes(lim limits) int64 {
	return int64(lim.DiskMiB)<<20 + int64(lim.DiskInodes)*inodeSize
}

// inodeSize is the bytes of inode table each inode takes.
const inodeSize = 256

// ensureDisk mounts the filesystem of sandbox m (in dir) at this driver's
// mount point unless it is mounted there.
func (d *Driver) ensureDisk(m *meta, dir string) error {
	if !ownDisk(m) {
		return nil
	}
	if ok, err := d.isMounted(dir); ok || err != nil {
		return err
	}
	return d.mountDisk(dir, false)
}

// ownDisk reports whether sandbox m has a filesystem of its own.
func ownDisk(m *meta) bool { return m.Limits != nil && m.Limits.DiskImage }

// mountPoint is where this driver mounts the filesystem of sandbox dir.
func (d *Driver) mountPoint(dir string) string {
	return filepath.Join(dir, diskMounts, strings.TrimSuffix(d.cgroupPrefix, "-"))
}

// hostArea is the host directory behind the sandbox's workdir (workDir)
// or /tmp (tmpDir).
func (d *Driver) hostArea(m *meta, dir, sub string) string {
	if ownDisk(m) {
		return filepath.Join(d.mountPoint(dir), sub)
	}
	return filepath.Join(dir, sub)
}

// isMounted reports whether this driver's mount point in dir has the
// filesystem on it.
func (d *Driver) isMounted(dir string) (bool, error) {
	var parent, mnt unix.Stat_t
	if err := unix.Lstat(filepath.Join(dir, diskMounts), &parent); err != nil {
		return false, fmt.Errorf("the sandbox's disk mount points are missing (%v); destroy the sandbox and create it again", err)
	}
	if err := unix.Lstat(d.mountPoint(dir), &mnt); errors.Is(err, unix.ENOENT) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return mnt.Dev != parent.Dev, nil
}

// mountDisk mounts dir's image at this driver's mount point, through the
// loop device it is attached to, or a free one. The image's lock keeps two
// workers from attaching it twice. The loop device frees itself once its
// last mount is gone (LO_FLAGS_AUTOCLEAR). A fresh image, one makeDisk
// just made, is attached to no loop device: the search for one (every
// attached device opened and asked) is skipped.
func (d *Driver) mountDisk(dir string, fresh bool) error {
	img, err := os.OpenFile(filepath.Join(dir, diskImage), os.O_RDWR|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("cannot open the sandbox's disk image: %v; destroy the sandbox and create it again", err)
	}
	defer img.Close()
	if err := unix.Flock(int(img.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("cannot lock the sandbox's disk image: %v", err)
	}
	if ok, err := d.isMounted(dir); ok || err != nil {
		return err
	}
	mnt := d.mountPoint(dir)
	if err := os.Mkdir(mnt, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("cannot make a mount point for the sandbox's disk: %v", err)
	}
	var loop *os.File
	if !fresh {
		loop, err = findLoop(img)
	}
	if err == nil && loop == nil {
		loop, err = attachLoop(filepath.Join(dir, diskImage))
	}
	if err != nil {
		return err
	}
	// discard: what the sandbox deletes is freed in the host's image.
	// nobarrier: no cache flush, which the loop device turns into an
	// fsync of the whole image on the host (5 of them at each unmount, a
	// wait for the host's disk): a journal-less filesystem gains no crash
	// safety from them, and the image lives in the host's page cache,
	// where the next mount, by any worker of this host, reads it.
	err = unix.Mount(loop.Name(), mnt, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, "discard,errors=remount-ro,nobarrier")
	loop.Close() // the mount holds it now; on failure this frees it
	if err != nil {
		return fmt.Errorf("cannot mount the sandbox's disk (%s): %v", loop.Name(), err)
	}
	return nil
}

// findLoop opens the loop device img is attached to, nil when none is.
// The device is checked once open, which keeps it attached: one found
// free meanwhile, or taken by another image, is passed over.
func findLoop(img *os.File) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(img.Fd()), &st); err != nil {
		return nil, err
	}
	names, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, n := range names {
		dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(n)))
		f, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			continue
		}
		info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
		if err == nil && info.Inode == st.Ino && info.Device == st.Dev {
			return f, nil
		}
		f.Close()
	}
	return nil, nil
}

// attachLoop attaches image name to a free loop device and returns it
// open. The device gets an open file of its own, not the one mountDisk
// locks: the device keeps its file as long as it is attached, and with it
// would keep the lock, so the next worker to mount waited forever.
func attachLoop(name string) (*os.File, error) {
	img, err := os.OpenFile(name, os.O_RDWR|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("cannot open the sandbox's disk image: %v; destroy the sandbox and create it again", err)
	}
	defer img.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("cannot mount the sandbox's disk: %v", err)
	}
	defer ctl.Close()
	for range 32 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("cannot get a free loop device for the sandbox's disk: %v", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		loop, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("cannot open %s for the sandbox's disk: %v", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], name)
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
		if err == nil {
			return loop, nil
		}
		loop.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("cannot attach the sandbox's disk image to %s: %v", dev, err)
		}
		// Another process took it first: ask again.
	}
	return nil, errors.New("cannot get a free loop device for the sandbox's disk: every one was taken by others meanwhile; try again")
}

// holdDisk opens what keeps the filesystem of sandbox directory dir alive
// once it is unmounted and its image unlinked: each of its mounts here (a
// lazily unmounted filesystem lives on while a file on it is open) and,
// last, the image. Whoever closes the last of them tears the filesystem
// and its loop device down and frees the image's blocks, a wait of 5-20
// ms on the development machine (its root filesystem is mounted with
// discard), which Destroy leaves to Driver.release.
func holdDisk(dir string) []int {
	var held []int
	points, _ := filepath.Glob(filepath.Join(dir, diskMounts, "*"))
	for _, p := range points {
		if fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
			held = append(held, fd)
		}
	}
	if fd, err := unix.Open(filepath.Join(dir, diskImage), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
		held = append(held, fd)
	}
	return held
}

// unmountDisk detaches every mount of the sandbox directory dir's
// filesystem, any driver's, before the directory is removed: removing it
// mounted would fail on the mount points. Commands still running keep
// the filesystem until they end.
func unmountDisk(dir string) error {
	points, _ := filepath.Glob(filepath.Join(dir, diskMounts, "*"))
	var errs []error
	for _, p := range points {
		if err := unmount(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// unmount detaches the filesystem at mount point p, if one is there.
func unmount(p string) error {
	err := unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EPERM) {
		return nil // not mounted (EPERM: nor could this worker have mounted it)
	}
	return fmt.Errorf("cannot unmount the sandbox's disk at %s: %v", p, err)
}

// unmountAll detaches this driver's mounts, in every sandbox (and half-made
// or half-removed one) under the root: Close calls it once no command of
// this driver runs. Another worker's file access meanwhile mounts its own.
func (d *Driver) unmountAll() {
	if d.mkfs == "" {
		return
	}
	entries, err := os.ReadDir(d.root)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue // the budget lock
		}
		p := d.mountPoint(filepath.Join(d.root, e.Name()))
		if err := unmount(p); err != nil {
			d.log.Warn("a sandbox's disk stays mounted", "error", err)
			continue
		}
		os.Remove(p)
	}
}

// diskFull reports whether the filesystem of sandbox m (in dir) has no
// block or no inode left.
func (d *Driver) diskFull(m *meta, dir string) bool {
	if !ownDisk(m) {
		return false
	}
	var st unix.Statfs_t
	if err := unix.Statfs(d.mountPoint(dir), &st); err != nil {
		return false
	}
	// ext4 fails a write while a little stays free (what a file's extent
	// tree may need): under 1% or 1 MiB free is full.
	return st.Bavail < max(st.Blocks/100, (1<<20)/uint64(st.Bsize)) || st.Ffree == 0
}

// diskReady mounts sandbox m's filesystem where needed before a command
// runs or a file is written. A sandbox without one (made before the
// backend had them, or while the operator had the limit off) would write
// without a bound: it is refused while this worker enforces the limit.
func (d *Driver) diskReady(m *meta, dir string) error {
	if !ownDisk(m) && !d.diskOff {
		return fmt.Errorf("disk: this sandbox has no filesystem of its own (it was created before the local backend enforced disk_mib with one, or while the operator had the limit off), so nothing would limit what it writes; its files can still be read: copy out what you need, then destroy it and create it again")
	}
	return d.ensureDisk(m, dir)
}

// isNoSpace reports whether err is a write's failure on a full filesystem.
func isNoSpace(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)
}

// HostDirs are the host directories behind sandbox id's workdir and /tmp
// (on its filesystem, mounted here if it was not): for tests and for an
// operator looking into a sandbox from the worker.
func (d *Driver) HostDirs(id string) (workdir, tmp string, err error) {
	m, dir, err := d.readMeta("locate", id)
	if err == nil {
		err = d.ensureDisk(m, dir)
	}
	if err != nil {
		return "", "", err
	}
	return d.hostArea(m, dir, workDir), d.hostArea(m, dir, tmpDir), nil
}
