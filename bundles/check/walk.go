package check

import (
	"os"
	"path/filepath"
	"syscall"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/footer"
)

// bundleFile is one file the coordinator's walk yields.
type bundleFile struct {
	path string
	// b is the bundle as the coordinator reads it; nil when it is not one
	// (no footer, a binary modified after packing): the coordinator skips
	// such a file without a word.
	b   *footer.Bundle
	err error
	// notExecutable: a bundle the coordinator skips because the worker's
	// user may not execute it.
	notExecutable bool
}

// lists reports whether the bundle's manifest lists dagID.
func (f bundleFile) lists(dagID string) bool {
	if f.b == nil {
		return false
	}
	_, ok := f.b.Manifest.Dags[dagID]
	return ok
}

// walk lists the files Airflow 3.3's ExecutableCoordinator considers, in
// the order it considers them (task SDK 1.3.2, _find_executables): each
// root in turn, a file root itself, a directory depth first with its
// entries in the order the directory lists them (os.listdir: not sorted,
// so the order is the filesystem's), symlinks followed, each directory
// once, only regular files the current user may execute. The coordinator
// runs a Dag's tasks with the first of them whose manifest lists the
// dag_id and whose schema version it knows.
func walk(roots []string) []bundleFile {
	var files []bundleFile
	type dirKey struct{ dev, ino uint64 }
	seen := map[dirKey]bool{}
	var visit func(paths []string)
	visit = func(paths []string) {
		for _, p := range paths {
			st, err := os.Stat(p)
			if err != nil {
				continue
			}
			if st.IsDir() {
				if sys, ok := st.Sys().(*syscall.Stat_t); ok {
					k := dirKey{uint64(sys.Dev), sys.Ino}
					if seen[k] {
						continue
					}
					seen[k] = true
				}
				d, err := os.Open(p)
				if err != nil {
					continue
				}
				names, err := d.Readdirnames(-1) // directory order, as os.listdir
				d.Close()
				if err != nil {
					continue
				}
				children := make([]string, len(names))
				for i, n := range names {
					children[i] = filepath.Join(p, n)
				}
				visit(children)
				continue
			}
			if !st.Mode().IsRegular() {
				continue
			}
			b, err := footer.Read(p)
			if syscall.Access(p, 1 /* X_OK */) != nil {
				// Skipped by the coordinator; kept to explain a Dag no
				// bundle serves.
				if err == nil {
					files = append(files, bundleFile{path: p, b: b, notExecutable: true})
				}
				continue
			}
			files = append(files, bundleFile{path: p, b: b, err: err})
		}
	}
	visit(roots)
	return files
}
