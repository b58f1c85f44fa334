package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// Layout of one sandbox directory under Options.Root:
//
//	<root>/<name>/meta.json  the spec (env included, hence 0600), tags, times
//	<root>/<name>/disk.img   its filesystem (disk.go), mounted at disk/
//	<root>/<name>/disk/work/ bound read-write at the spec's workdir
//	<root>/<name>/disk/tmp/  bound read-write at /tmp, so /tmp persists
//	                         between commands as it does in a container
//
// Without a filesystem of its own (limits.DiskImage unset) work/ and tmp/
// lie in <root>/<name>/ itself.
const (
	metaFile = "meta.json"
	workDir  = "work"
	tmpDir   = "tmp"
)

// meta is what meta.json holds.
type meta struct {
	Name   string            `json:"name"`
	Spec   driver.Spec       `json:"spec"`
	Rootfs string            `json:"rootfs,omitempty"` // host dir used as /, "" = host userland
	Tags   map[string]string `json:"tags"`
	// Host is the worker host it was created on, part of its id; "" for
	// sandboxes made before ids named their host.
	Host      string    `json:"host,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// Limits are the memory and disk limits set at creation; nil for a
	// sandbox made before there were any (the driver's defaults apply).
	Limits *limits `json:"limits,omitempty"`
}

// limits a sandbox runs under.
type limits struct {
	MemoryMiB int `json:"memory_mib"`
	DiskMiB   int `json:"disk_mib"`
	// DiskInodes caps the files and directories its filesystem holds.
	DiskInodes int `json:"disk_inodes,omitempty"`
	// DiskImage: its workdir and /tmp live on a filesystem of its own
	// (disk.go), not in plain directories (the layout before it, or with
	// the operator's DiskLimitEnv=off).
	DiskImage bool `json:"disk_image,omitempty"`
	// Sandbox is the host uid and gid its processes run as (userns.go);
	// zero: the worker's own.
	Sandbox ids `json:"sandbox,omitzero"`
	// MaxProcesses caps the processes and threads of all its commands
	// together (a root worker's pids cgroup) or of each (RLIMIT_NPROC); 0
	// for a sandbox made before sandboxes recorded it (the driver's
	// applies) or with the limit off.
	MaxProcesses int `json:"max_processes,omitempty"`
}

func (m *meta) info() driver.Info {
	return driver.Info{
		ID: idFor(m.Name, m.Host), Name: m.Name, Backend: Backend, Workdir: m.Spec.Workdir,
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

// A local sandbox's id is <name>@<host>: its directory's name under the
// root, and the worker host it lives on, so a task on another host can say
// where the sandbox is rather than that it does not exist.
func idFor(name, host string) string {
	if host == "" {
		return name
	}
	return name + "@" + host
}

// dir maps an id to the sandbox's directory. An id naming another host is
// ErrOtherHost, unless this root holds that sandbox as made on that host
// (this host was renamed since).
func (d *Driver) dir(op, id string) (string, error) {
	name, host, _ := strings.Cut(id, "@")
	if !validName(name) || (strings.Contains(id, "@") && !validHost(host)) {
		return "", &driver.Error{Op: op, Sandbox: id, Kind: driver.ErrGone,
			Err: fmt.Errorf("%q is not a local sandbox id (expected a name like airflow-sandbox-0123456789ab@host)", id)}
	}
	dir := filepath.Join(d.root, name)
	if host != "" && host != d.host && !madeOn(dir, host) {
		return "", &driver.Error{Op: op, Sandbox: id, Kind: driver.ErrOtherHost, Err: fmt.Errorf(
			"this local sandbox lives on host %s, but this task runs on host %s: a local sandbox never leaves the worker that created it. "+
				"Run the tasks that share it (provision and every task given its id: run, export, collect, destroy, an attaching agent) on one host, "+
				"through a queue only that worker consumes (its own queue mapped to the Go coordinator in [sdk] queue_to_coordinator, "+
				"e.g. airflow celery worker --queues golang_%s), or provision it on a remote backend (modal, opensandbox)", host, d.host, host)}
	}
	return dir, nil
}

// madeOn reports whether the sandbox in dir records host as its own.
func madeOn(dir, host string) bool {
	raw, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		return false
	}
	var m struct {
		Host string `json:"host"`
	}
	return json.Unmarshal(raw, &m) == nil && m.Host == host
}

// validHost accepts a host name as it may stand in an id: letters, digits,
// '.', '-' and '_', at most 253 of them.
func validHost(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '.' && c != '-' && c != '_' {
			return false
		}
	}
	return true
}

// readMeta loads a sandbox's meta.json; ErrGone when the sandbox does not exist.
func (d *Driver) readMeta(op, id string) (*meta, string, error) {
	dir, err := d.dir(op, id)
	if err != nil {
		return nil, "", err
	}
	raw, err := os.ReadFile(filepath.Join(dir, metaFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", &driver.Error{Op: op, Sandbox: id, Kind: driver.ErrGone,
			Err: fmt.Errorf("no local sandbox %s under %s; it was destroyed or never existed", id, d.root)}
	}
	if err != nil {
		return nil, "", &driver.Error{Op: op, Sandbox: id, Err: err}
	}
	var m meta
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, "", &driver.Error{Op: op, Sandbox: id,
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
		return nil, "", &driver.Error{Op: op, Sandbox: id, Kind: driver.ErrGone,
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
