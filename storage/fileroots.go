package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// FileRootsEnv names the worker setting that confines file:// URLs: a
// colon-separated list of absolute directories. A file:// source or
// destination must lie under one of them once symlinks are resolved;
// unset or empty, file:// is refused. Whoever triggers a Dag run may choose
// URLs (through dag_run.conf, when the Dag allows it), so the worker's
// operator, not the URL, decides which host files a task may read or write.
const FileRootsEnv = "AIRFLOW_GO_WORKER_FILE_ROOTS"

// fileRoot is one configured directory, opened as an os.Root so that every
// operation under it refuses to leave it, even through a symlink swapped in
// after the URL was checked.
type fileRoot struct {
	dir string // as resolved (symlinks followed), absolute
}

// fileRoots reads FileRootsEnv. Each entry must be an absolute, existing
// directory; a mistake there is an error naming it, not a silently smaller
// set.
func fileRoots() ([]fileRoot, error) {
	raw := os.Getenv(FileRootsEnv)
	var roots []fileRoot
	for _, d := range filepath.SplitList(raw) {
		if d == "" {
			continue
		}
		if !filepath.IsAbs(d) {
			return nil, fmt.Errorf("%s: %q is not an absolute path; list absolute directories separated by ':'", FileRootsEnv, d)
		}
		real, err := filepath.EvalSymlinks(d)
		if err != nil {
			return nil, fmt.Errorf("%s: %q cannot be used (%v); create it or remove it from the list", FileRootsEnv, d, unwrapPath(err))
		}
		fi, err := os.Stat(real)
		if err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("%s: %q is not a directory; list directories only", FileRootsEnv, d)
		}
		roots = append(roots, fileRoot{dir: real})
	}
	return roots, nil
}

// errNoFileRoots says file:// is off and how to turn it on.
var errNoFileRoots = fmt.Errorf("file:// URLs are refused on this worker because %s is not set; the worker's operator lists the directories file:// may read and write there (colon-separated absolute paths), or write to object storage instead", FileRootsEnv)

// confine finds the root p lies under, after resolving the symlinks of the
// part of p that exists, and returns it with p relative to it. A path
// outside every root is an error that names the roots. Errors do not repeat
// p: callers name the URL.
func confine(p string) (fileRoot, string, error) {
	roots, err := fileRoots()
	if err != nil {
		return fileRoot{}, "", err
	}
	if len(roots) == 0 {
		return fileRoot{}, "", errNoFileRoots
	}
	resolved, err := resolveExisting(filepath.Clean(p))
	if err != nil {
		return fileRoot{}, "", unwrapPath(err)
	}
	best, rel := -1, ""
	for i, r := range roots {
		if rp, ok := within(r.dir, resolved); ok && (best < 0 || len(r.dir) > len(roots[best].dir)) {
			best, rel = i, rp
		}
	}
	if best < 0 {
		dirs := make([]string, len(roots))
		for i, r := range roots {
			dirs[i] = r.dir
		}
		shown := ""
		if resolved != filepath.Clean(p) {
			shown = fmt.Sprintf(" (it resolves to %s)", resolved)
		}
		return fileRoot{}, "", fmt.Errorf("it lies outside the directories file:// may use on this worker%s; use a path under %s, or ask the worker's operator to add its directory to %s", shown, strings.Join(dirs, ", "), FileRootsEnv)
	}
	return roots[best], rel, nil
}

// resolveExisting follows the symlinks of the longest existing prefix of p
// and appends the rest unchanged (it will be created, so it holds no link).
func resolveExisting(p string) (string, error) {
	rest := ""
	for cur := p; ; {
		real, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(real, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p, nil
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// within reports whether p is root or below it, and p relative to root.
func within(root, p string) (string, bool) {
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return "", false
	}
	return rel, true
}

// open opens the root for one operation; the caller closes it.
func (r fileRoot) open() (*os.Root, error) {
	root, err := os.OpenRoot(r.dir)
	if err != nil {
		return nil, fmt.Errorf("opening %s (from %s): %w", r.dir, FileRootsEnv, err)
	}
	return root, nil
}

// unwrapPath drops the *PathError wrapper, whose path our messages already
// name.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
