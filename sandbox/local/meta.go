package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// Layout of one sandbox directory under Options.Root:
//
//	<root>/<name>/meta.json  the spec (env included, hence 0600), tags, times
//	<root>/<name>/work/      bound read-write at the spec's workdir
//	<root>/<name>/tmp/       bound read-write at /tmp, so /tmp persists
//	                         between commands as it does in a container
const (
	metaFile = "meta.json"
	workDir  = "work"
	tmpDir   = "tmp"
)

// meta is what meta.json holds.
type meta struct {
	Name      string            `json:"name"`
	Spec      sandbox.Spec      `json:"spec"`
	Rootfs    string            `json:"rootfs,omitempty"` // host dir used as /, "" = host userland
	Tags      map[string]string `json:"tags"`
	CreatedAt time.Time         `json:"created_at"`
	ExpiresAt time.Time         `json:"expires_at"`
}

func (m *meta) info() sandbox.Info {
	return sandbox.Info{
		ID: m.Name, Name: m.Name, Backend: Backend, Workdir: m.Spec.Workdir,
		CreatedAt: m.CreatedAt, ExpiresAt: m.ExpiresAt, Tags: cloneTags(m.Tags),
	}
}

func (m *meta) expired(now time.Time) bool {
	return !m.ExpiresAt.IsZero() && !now.Before(m.ExpiresAt)
}

// validName keeps ids from naming anything but a direct child of the root:
// a letter or digit, then up to 127 letters, digits, '_' or '-'. A loop,
// not a regexp: the counted repetition compiled at start-up cost every
// task that links this package a millisecond.
func validName(s string) bool {
	if len(s) == 0 || len(s) > 128 || !isAlnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func (d *Driver) dir(id string) (string, error) {
	if !validName(id) {
		return "", &sandbox.Error{Op: "open sandbox", Sandbox: id, Kind: sandbox.ErrGone,
			Err: fmt.Errorf("%q is not a local sandbox id (expected a name like airflow-sandbox-0123456789ab)", id)}
	}
	return filepath.Join(d.root, id), nil
}

// readMeta loads a sandbox's meta.json; ErrGone when the sandbox does not exist.
func (d *Driver) readMeta(op, id string) (*meta, string, error) {
	dir, err := d.dir(id)
	if err != nil {
		return nil, "", err
	}
	raw, err := os.ReadFile(filepath.Join(dir, metaFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", &sandbox.Error{Op: op, Sandbox: id, Kind: sandbox.ErrGone,
			Err: fmt.Errorf("no local sandbox %s under %s; it was destroyed or never existed", id, d.root)}
	}
	if err != nil {
		return nil, "", &sandbox.Error{Op: op, Sandbox: id, Err: err}
	}
	var m meta
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, "", &sandbox.Error{Op: op, Sandbox: id,
			Err: fmt.Errorf("%s is corrupt (%v); destroy the sandbox and create a new one", filepath.Join(dir, metaFile), err)}
	}
	return &m, dir, nil
}

// liveMeta is readMeta plus the expiry check: an expired sandbox is gone for
// everything but Info, Tags, listing and Destroy, which sweeping needs.
func (d *Driver) liveMeta(op, id string) (*meta, string, error) {
	m, dir, err := d.readMeta(op, id)
	if err != nil {
		return nil, "", err
	}
	if m.expired(d.now()) {
		return nil, "", &sandbox.Error{Op: op, Sandbox: id, Kind: sandbox.ErrGone,
			Err: fmt.Errorf("sandbox expired at %s; create a new one with a longer timeout", m.ExpiresAt.UTC().Format(time.RFC3339))}
	}
	return m, dir, nil
}

// writeMeta replaces meta.json atomically (temp file + rename) so a reader
// never sees half a file.
func writeMeta(dir string, m *meta) error {
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, metaFile), raw, 0o600)
}

func writeFileAtomic(path string, data []byte, perm fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func cloneTags(t map[string]string) map[string]string {
	out := make(map[string]string, len(t))
	for k, v := range t {
		out[k] = v
	}
	return out
}
