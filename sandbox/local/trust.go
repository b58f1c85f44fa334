package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Whoever can write a directory on the way to a path, or owns a symlink on
// it, decides what the path names. bubblewrap runs with the worker's rights
// (root in most containers), so every host path it is given must be one that
// no other host user can redirect: the sandboxes' root and image
// directories are checked here, and image directories are handed to
// bubblewrap as open file descriptors, never as paths.

// trusted reports whether uid may control paths the worker relies on: the
// worker itself, or root (who can do anything anyway).
func trusted(uid uint32) bool { return uid == 0 || int(uid) == os.Geteuid() }

func ownerOf(st fs.FileInfo) uint32 {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Uid
	}
	return ^uint32(0) // unknown: never trusted
}

// resolveTrusted resolves p as filepath.EvalSymlinks does, but refuses a
// symlink on the way that someone other than the worker or root owns: its
// owner chooses where it leads (and, in a shared /tmp with
// fs.protected_symlinks=0, could aim it at any directory).
func resolveTrusted(p string) (string, error) {
	const maxLinks = 40
	links := 0
	done := "/"
	rest := strings.Split(filepath.Clean(p), "/")
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			done = filepath.Dir(done) // done never holds a symlink
			continue
		}
		next := filepath.Join(done, c)
		st, err := os.Lstat(next)
		if err != nil {
			return "", err
		}
		if st.Mode()&fs.ModeSymlink == 0 {
			done = next
			continue
		}
		if uid := ownerOf(st); !trusted(uid) {
			return "", fmt.Errorf("%s is a symlink owned by uid %d, who could point it at any directory", next, uid)
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("%s: too many levels of symlinks", p)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			done = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return done, nil
}

// checkAncestors makes sure no other user can rename or replace anything on
// the way to the resolved path real: every directory above it belongs to
// the worker or root, and one others may write must be sticky (like /tmp),
// where they cannot move entries they do not own.
func checkAncestors(real string) error {
	for dir := filepath.Dir(real); ; dir = filepath.Dir(dir) {
		st, err := os.Lstat(dir)
		if err != nil {
			return err
		}
		if uid := ownerOf(st); !trusted(uid) {
			return fmt.Errorf("its parent %s belongs to uid %d, who could replace it", dir, uid)
		}
		if st.Mode().Perm()&0o022 != 0 && st.Mode()&fs.ModeSticky == 0 {
			return fmt.Errorf("its parent %s is writable by other users (mode %v) and not sticky, so they could replace it", dir, st.Mode().Perm())
		}
		if dir == "/" {
			return nil
		}
	}
}

// openDirNoFollow opens directory p, which must already be resolved, one
// component at a time with O_NOFOLLOW: a symlink planted anywhere on the
// way since p was checked fails the open instead of being followed.
func openDirNoFollow(p string) (*os.File, error) {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	for _, c := range strings.Split(filepath.Clean(p), "/") {
		if c == "" {
			continue
		}
		next, err := unix.Openat(fd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%s: %s is no longer a directory (a symlink or file took its place)", p, c)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		fd = next
	}
	// O_PATH cannot list entries: reopen the directory itself for reading.
	rfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	unix.Close(fd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return os.NewFile(uintptr(rfd), p), nil
}

// checkControlled refuses a file or directory another user could change
// under the sandbox: owned by someone other than the worker or root, or
// writable by group or others.
func checkControlled(what, p string, st fs.FileInfo) error {
	if uid := ownerOf(st); !trusted(uid) {
		return fmt.Errorf("%s %s belongs to uid %d, who could change it while sandboxes use it; chown it to this worker (uid %d) or root", what, p, uid, os.Geteuid())
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s %s is writable by group or others (mode %v), who could change it while sandboxes use it; chmod go-w it", what, p, st.Mode().Perm())
	}
	return nil
}

// within reports whether p is dir or lies below it (both clean and absolute).
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}
