package opensandbox

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	osdk "github.com/alibaba/OpenSandbox/sdks/sandbox/go"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// Stat and listing by commands in the sandbox, for execd builds whose API
// cannot give them (released v1.0.18: GET /files/info has no type and
// follows symlinks; GET /directories/list does not exist). They use only
// POSIX sh and stat and od, as coreutils and busybox have them.
//
// Command output travels as JSON strings, so a byte that is not UTF-8
// arrives as U+FFFD and a carriage return as a line break: names that are
// not printable ASCII are therefore sent hex-encoded.

// Exit codes of the helper scripts.
const (
	exitMissing = 3 // the path does not exist (or a link leads nowhere)
	exitNotDir  = 4 // a listing of something that is not a directory
)

// statFormat prints type|size|mode|mtime; the type is stat's %F text.
const statFormat = `%F|%s|%a|%Y`

// statScript describes $1 (following a final symlink with -L).
func statScript(p string, follow bool) string {
	exists, flag := `[ -e "$p" ] || [ -L "$p" ]`, ""
	if follow {
		exists, flag = `[ -e "$p" ]`, " -L"
	}
	return "export LC_ALL=C; p=" + shellQuote(p) + "\n" + exists + " || exit " + strconv.Itoa(exitMissing) +
		"\nstat" + flag + " -c '" + statFormat + "' -- \"$p\""
}

// listScript lists $1's entries (a symlink to a directory is entered):
// names of printable ASCII are statted together, each as a line
// "p|type|size|mode|mtime|name"; other names one by one, as
// "x|type|size|mode|mtime|hex of the name". An entry that vanishes
// meanwhile is left out.
func listScript(dir string) string {
	return "export LC_ALL=C; d=" + shellQuote(dir) + `
[ -e "$d" ] || exit ` + strconv.Itoa(exitMissing) + `
[ -d "$d" ] || exit ` + strconv.Itoa(exitNotDir) + `
cd -- "$d" || exit 1
set --
for f in * .[!.]* ..?*; do
  [ -e "$f" ] || [ -L "$f" ] || continue
  case $f in
  *[!\ -~]*)
    s=$(stat -c '` + statFormat + `' -- "$f") || continue
    printf 'x|%s|%s\n' "$s" "$(printf %s "$f" | od -An -v -tx1 | tr -d ' \n')" ;;
  *) set -- "$@" "$f" ;;
  esac
done
[ $# -eq 0 ] || stat -c 'p|` + statFormat + `|%n' -- "$@" 2>/dev/null
exit 0`
}

// statInSandbox describes p with stat in the sandbox.
func (d *Driver) statInSandbox(ctx context.Context, id, op, p string, follow bool) (osdk.FileInfo, error) {
	res, err := d.run(ctx, id, statScript(p, follow))
	if err != nil {
		return osdk.FileInfo{}, fail(op, id, p, nil, err)
	}
	switch res.code {
	case 0:
	case exitMissing:
		return osdk.FileInfo{}, fail(op, id, p, driver.ErrNotFound, nil)
	default:
		return osdk.FileInfo{}, fail(op, id, p, nil, fmt.Errorf("stat in the sandbox failed (exit %d): %s", res.code, strings.TrimSpace(res.stderr)))
	}
	fi, err := parseStat(strings.TrimSuffix(res.stdout, "\n"))
	if err != nil {
		return osdk.FileInfo{}, fail(op, id, p, nil, err)
	}
	fi.Path = p
	return fi, nil
}

// listInSandbox lists dir's entries with a script in the sandbox.
func (d *Driver) listInSandbox(ctx context.Context, id, dir string) ([]osdk.FileInfo, error) {
	res, err := d.run(ctx, id, listScript(dir))
	if err != nil {
		return nil, fail("list", id, dir, nil, err)
	}
	switch res.code {
	case 0:
	case exitMissing:
		return nil, fail("list", id, dir, driver.ErrNotFound, nil)
	case exitNotDir:
		return nil, fail("list", id, dir, nil, errors.New("not a directory"))
	default:
		return nil, fail("list", id, dir, nil, fmt.Errorf("listing in the sandbox failed (exit %d): %s", res.code, strings.TrimSpace(res.stderr)))
	}
	var out []osdk.FileInfo
	for _, line := range strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, "|", 6)
		if len(f) != 6 {
			return nil, fail("list", id, dir, nil, fmt.Errorf("unexpected listing line %q", line))
		}
		fi, err := parseStat(strings.Join(f[1:5], "|"))
		if err != nil {
			return nil, fail("list", id, dir, nil, err)
		}
		name := f[5]
		if f[0] == "x" {
			b, err := hex.DecodeString(name)
			if err != nil {
				return nil, fail("list", id, dir, nil, fmt.Errorf("unexpected listing line %q", line))
			}
			name = string(b)
		}
		fi.Path = name
		out = append(out, fi)
	}
	return out, nil
}

// parseStat reads one "type|size|mode|mtime" line of stat's output.
func parseStat(line string) (osdk.FileInfo, error) {
	f := strings.Split(line, "|")
	if len(f) != 4 {
		return osdk.FileInfo{}, fmt.Errorf("unexpected stat output %q", line)
	}
	size, err1 := strconv.ParseInt(f[1], 10, 64)
	mode, err2 := strconv.Atoi(f[2]) // octal digits, as execd writes modes
	mtime, err3 := strconv.ParseInt(f[3], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return osdk.FileInfo{}, fmt.Errorf("unexpected stat output %q: %v", line, err)
	}
	return osdk.FileInfo{Type: statType(f[0]), Size: size, Mode: mode, ModifiedAt: time.Unix(mtime, 0)}, nil
}

// statType maps stat's %F onto execd's type names.
func statType(s string) string {
	switch s {
	case "regular file", "regular empty file":
		return "file"
	case "directory":
		return "directory"
	case "symbolic link":
		return "symlink"
	}
	return "other"
}
