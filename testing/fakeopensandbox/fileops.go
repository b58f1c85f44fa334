package fakeopensandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// The rest of execd's file routes, as the real builds answer them:
//
//   - GET /files/search?path=&pattern= walks path (symlinks not followed)
//     and returns every entry that is not a directory whose base name
//     matches the glob (default "**"), in walk order, typed in VersionMain.
//   - POST /files/mv [{src, dest}] renames, creating dest's parent; a
//     missing src is a 500 in VersionV1018 and a 404 in VersionMain; a
//     dest that exists (through a symlink) is a 500; a dangling symlink at
//     dest is replaced.
//   - POST /files/permissions {path: {mode, owner, group}}: chmod, then
//     the owner as uploads set it.
//   - POST /files/replace {path: {old, new}} rewrites the file in place
//     (through a symlink); VersionMain refuses an empty old and answers
//     ?verbose=true with {path: {replacedCount}}.
//   - GET /metrics: {cpu_count, cpu_used_pct, mem_total_mib, mem_used_mib,
//     timestamp}.
//
// Globs are matched with path.Match; execd's doublestar also knows {a,b}.

func (s *Server) search(w http.ResponseWriter, r *http.Request, b *sbx) {
	raw := r.URL.Query().Get("path")
	if raw == "" {
		execdError(w, http.StatusBadRequest, "MISSING_QUERY", "missing query parameter 'path'")
		return
	}
	root := s.resolve(raw)
	pattern := r.URL.Query().Get("pattern")
	if pattern == "" {
		pattern = "**"
	}
	if _, err := path.Match(pattern, ""); err != nil {
		execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", fmt.Sprintf("error searching files. invalid pattern %s: %v", pattern, err))
		return
	}
	if _, err := s.statFollow(r.Context(), b, root); errors.Is(err, sandbox.ErrNotFound) {
		fileMissing(w, notExist("stat", root))
		return
	} else if err != nil {
		backingError(w, err)
		return
	}
	out := []fileInfo{}
	var walk func(p string, fi sandbox.FileInfo) error
	walk = func(p string, fi sandbox.FileInfo) error {
		if !fi.IsDir() {
			if ok, _ := path.Match(pattern, path.Base(p)); ok {
				out = append(out, s.toInfo(fi, p))
			}
			return nil
		}
		entries, err := s.drv.List(r.Context(), b.id, p)
		if err != nil {
			return err
		}
		sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
		for _, e := range entries {
			if err := walk(path.Join(p, e.Name), e); err != nil {
				return err
			}
		}
		return nil
	}
	fi, err := s.drv.Stat(r.Context(), b.id, root)
	if err == nil {
		err = walk(root, fi)
	}
	if err != nil {
		execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "error searching files. "+err.Error())
		return
	}
	execdJSON(w, http.StatusOK, out)
}

// moveScript is execd's RenameFile for one item.
const moveScript = `src=$1 dst=$2
[ -e "$src" ] || exit 31
d=$(dirname -- "$dst")
mkdir -p -- "$d" 2>/dev/null || { set -- "$d"; ` + notDirScript + `; exit 22; }
[ -e "$dst" ] && exit 33
mv -f -T -- "$src" "$dst" || exit 23`

func (s *Server) move(w http.ResponseWriter, r *http.Request, b *sbx) {
	var items []struct {
		Src  string `json:"src"`
		Dest string `json:"dest"`
	}
	if err := json.NewDecoder(r.Body).Decode(&items); err != nil {
		bindError(w, err)
		return
	}
	for _, it := range items {
		src, dst := s.resolve(it.Src), s.resolve(it.Dest)
		res := s.sh(r.Context(), b, moveScript, nil, src, dst)
		failed := func(why string) {
			runtimeError(w, res, "error accessing file: "+why)
		}
		switch {
		case res.gone || res.runErr != nil:
			failed(res.err().Error())
		case res.code == 31 && s.typed():
			fileMissing(w, fmt.Sprintf("source path not found: %s: %s", it.Src, notExist("stat", src)))
		case res.code == 31:
			failed("source path not found: " + it.Src)
		case res.code == exitNotDir:
			failed(fmt.Sprintf("failed to create destination directory: mkdir %s: not a directory", res.stderr))
		case res.code == 33:
			failed("destination path already exists: " + it.Dest)
		case res.code != 0:
			failed(fmt.Sprintf("failed to rename file: rename %s %s: %s", src, dst, res.reason()))
		default:
			continue
		}
		return
	}
	w.WriteHeader(http.StatusOK)
}

// chmodScript is execd's ChmodFile: the mode, then the owner.
const chmodScript = `p=$1 mode=$2 owner=$3 group=$4
if [ -n "$mode" ]; then
  [ -e "$p" ] || exit 31
  chmod -- "$mode" "$p" || exit 23
fi` + ownerScript

func (s *Server) permissions(w http.ResponseWriter, r *http.Request, b *sbx) {
	var body map[string]permission
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		bindError(w, err)
		return
	}
	for raw, o := range body {
		p := s.resolve(raw)
		failed := func(why string) {
			execdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", fmt.Sprintf("error changing permissions for %s. %s", raw, why))
		}
		mode, err := scriptMode(o.Mode)
		if err != nil {
			failed(err.Error())
			return
		}
		res := s.sh(r.Context(), b, chmodScript, nil, p, mode, o.Owner, o.Group)
		switch {
		case res.gone || res.runErr != nil:
			runtimeError(w, res, fmt.Sprintf("error changing permissions for %s. %v", raw, res.err()))
		case res.code == 31:
			failed(notExist("chmod", p))
		case res.code == 26:
			failed(fmt.Sprintf("failed to set owner/group for %s: chown %s: %s", p, p, res.reason()))
		case res.code != 0:
			failed(fmt.Sprintf("chmod %s: %s", p, res.reason()))
		default:
			continue
		}
		return
	}
	w.WriteHeader(http.StatusOK)
}

// rewriteScript writes stdin over $1 in place, through a symlink, keeping
// its mode, as os.WriteFile does.
const rewriteScript = `cat > "$1" || exit 23`

func (s *Server) replace(w http.ResponseWriter, r *http.Request, b *sbx) {
	var body map[string]struct {
		Old string `json:"old"`
		New string `json:"new"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		bindError(w, err)
		return
	}
	verbose := s.typed() && r.URL.Query().Get("verbose") == "true"
	counts := map[string]map[string]int{}
	for raw, it := range body {
		p := s.resolve(raw)
		if _, err := s.statFollow(r.Context(), b, p); errors.Is(err, sandbox.ErrNotFound) {
			fileMissing(w, notExist("stat", p))
			return
		} else if err != nil {
			backingError(w, err)
			return
		}
		rc, _, err := s.drv.OpenFile(r.Context(), b.id, p, -1)
		if err != nil {
			backingError(w, err)
			return
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			backingError(w, err)
			return
		}
		if it.Old == "" && s.typed() {
			execdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "old content must not be empty")
			return
		}
		text := string(data)
		counts[raw] = map[string]int{"replacedCount": strings.Count(text, it.Old)}
		f, err := os.CreateTemp(s.spool, "replace-")
		if err != nil {
			backingError(w, err)
			return
		}
		_, err = io.WriteString(f, strings.ReplaceAll(text, it.Old, it.New))
		if err == nil {
			_, err = f.Seek(0, io.SeekStart)
		}
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			backingError(w, err)
			return
		}
		res := s.sh(r.Context(), b, rewriteScript, f, p)
		f.Close()
		os.Remove(f.Name())
		if res.gone || res.runErr != nil || res.code != 0 {
			runtimeError(w, res, fmt.Sprintf("error accessing file: open %s: %s", p, res.reason()))
			return
		}
	}
	if verbose {
		execdJSON(w, http.StatusOK, counts)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// metrics is GET /metrics, with the host's CPU count and figures that
// are plausible rather than measured.
func (s *Server) metrics(w http.ResponseWriter, _ *http.Request, _ *sbx) {
	execdJSON(w, http.StatusOK, map[string]any{
		"cpu_count": runtime.NumCPU(), "cpu_used_pct": 0.0,
		"mem_total_mib": 2048.0, "mem_used_mib": 64.0, "timestamp": time.Now().UnixMilli(),
	})
}
