package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Where sandboxes live. Whoever can write the sandbox root can swap a
// sandbox directory for a link to any host path, which the next command
// would mount read-write, and read every sandbox's env in meta.json; and
// whoever makes the root's name first can deny local sandboxes to the
// worker. So the root is the worker's own: under its XDG state directory,
// or for a root worker without one a directory of root's, never a name in
// the shared temporary directory, where any local user can make it (or a
// symlink) first.

// systemStateDir is a root worker's state directory when it has no
// XDG_STATE_HOME and no HOME of its own (a variable for tests).
var systemStateDir = "/var/lib/airflow-go-worker"

// DefaultRoot is where sandboxes live when Options.Root is empty: under
// the XDG state directory ($XDG_STATE_HOME, else $HOME/.local/state, as
// the XDG spec defaults it, when HOME is a directory of the worker's), else
// for a root worker under /var/lib/airflow-go-worker. Any other worker
// without either gets an error naming XDG_STATE_HOME.
func DefaultRoot() (string, error) {
	root, _, err := defaultRoot()
	return root, err
}

// defaultRoot is DefaultRoot; system says it lies in systemStateDir.
func defaultRoot() (root string, system bool, err error) {
	if s := os.Getenv("XDG_STATE_HOME"); s != "" && filepath.IsAbs(s) {
		return filepath.Join(s, "airflow-go-worker", "sandboxes"), false, nil
	}
	home := os.Getenv("HOME")
	if filepath.IsAbs(home) && home != "/" {
		if st, err := os.Stat(home); err == nil && st.IsDir() && int(ownerOf(st)) == os.Geteuid() {
			return filepath.Join(home, ".local", "state", "airflow-go-worker", "sandboxes"), false, nil
		}
	}
	if os.Geteuid() == 0 {
		return filepath.Join(systemStateDir, "sandboxes"), true, nil
	}
	return "", false, fmt.Errorf("the local backend keeps sandboxes in the worker's state directory, and this worker (uid %d) has none: XDG_STATE_HOME is unset and HOME (%q) is not a directory of its own; set XDG_STATE_HOME to a directory of the worker's (a name in the shared temporary directory would not do: another local user could make it first)", os.Geteuid(), home)
}

// rootFor is the resolved sandbox root: Options.Root (opt), else the
// default, made where missing and refused where another user controls it.
func rootFor(opt string) (string, error) {
	if opt != "" {
		root, err := filepath.Abs(opt)
		if err != nil {
			return "", fmt.Errorf("local sandbox root %q: %v", opt, err)
		}
		return secureRoot(root)
	}
	root, system, err := defaultRoot()
	if err == nil && system {
		err = makeStateDir(systemStateDir, filepath.Base(root))
	}
	if err == nil {
		root, err = secureRoot(root)
	}
	if err != nil {
		return "", fmt.Errorf("%w (this is the default root: a worker sets its own with XDG_STATE_HOME)", err)
	}
	return root, nil
}

// makeStateDir makes the state directory base and its sub directory, each
// 0700, or checks them where they exist: real directories, not symlinks
// (whoever placed one chose where sandboxes go), of the worker's uid and
// closed to writes by others.
func makeStateDir(base, sub string) error {
	for _, p := range []string{base, filepath.Join(base, sub)} {
		if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("cannot create the state directory %s: %v", p, err)
		}
		st, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("cannot stat the state directory %s: %v", p, err)
		}
		switch uid := ownerOf(st); {
		case st.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("refusing the state directory %s: it is a symlink, and whoever placed it chose where sandboxes would go; remove it", p)
		case !st.IsDir():
			return fmt.Errorf("refusing the state directory %s: it is not a directory; remove it", p)
		case int(uid) != os.Geteuid():
			return fmt.Errorf("refusing the state directory %s: it belongs to uid %d, not to this worker (uid %d), so that user could redirect sandboxes to host paths; remove it", p, uid, os.Geteuid())
		case st.Mode().Perm()&0o022 != 0:
			return fmt.Errorf("refusing the state directory %s: other users may write it (mode %v) and could replace what is in it; remove it, or chmod go-w it if it is this worker's", p, st.Mode().Perm())
		}
	}
	return nil
}

// secureRoot returns the resolved sandbox root, creating it (mode 0700)
// when missing, and refuses a root another host user controls: an
// operator's Options.Root may lie in a shared directory such as /tmp,
// where another user may have made it first or left a symlink to a
// directory of their choosing. It never changes the mode of a directory it
// did not create: that directory may be someone else's (or /tmp itself).
func secureRoot(root string) (string, error) {
	if _, err := os.Lstat(root); errors.Is(err, fs.ErrNotExist) {
		err := os.MkdirAll(filepath.Dir(root), 0o755)
		if err == nil {
			err = os.Mkdir(root, 0o700) // the umask can only narrow it
		}
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("cannot create the local sandbox root %s: %v; choose a writable directory (Options.Root)", root, err)
		}
	}
	real, err := resolveTrusted(root)
	if err != nil {
		return "", fmt.Errorf("refusing the local sandbox root %s: %v; remove it or choose a directory of your own (Options.Root)", root, err)
	}
	st, err := os.Lstat(real)
	if err != nil {
		return "", fmt.Errorf("cannot stat the local sandbox root %s: %v", real, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("the local sandbox root %s is not a directory; remove it or choose another directory (Options.Root)", real)
	}
	if uid := ownerOf(st); int(uid) != os.Geteuid() {
		return "", fmt.Errorf("the local sandbox root %s belongs to uid %d, not to this worker (uid %d), so that user could redirect sandboxes to host paths; remove it or choose a directory of your own (Options.Root)", real, uid, os.Geteuid())
	}
	// Sandbox directories are 0700 and meta.json 0600: others may list
	// the root, but must not write it.
	if st.Mode().Perm()&0o022 != 0 {
		return "", fmt.Errorf("the local sandbox root %s is writable by other users (mode %v), who could replace sandboxes with links to host paths; chmod go-w it if it is yours, or choose another directory (Options.Root)", real, st.Mode().Perm())
	}
	if err := checkAncestors(real); err != nil {
		return "", fmt.Errorf("refusing the local sandbox root %s: %v; choose a directory whose parents only this worker or root can write (Options.Root)", real, err)
	}
	return real, nil
}
