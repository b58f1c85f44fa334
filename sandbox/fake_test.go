package sandbox

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"maps"
	"sync"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// fakeDriver is an in-memory Driver for testing the portable layer: it
// records what it was asked and serves files from a map.
type fakeDriver struct {
	mu       sync.Mutex
	boxes    map[string]*fakeBox
	lastExec ExecRequest
	// execOut is what Exec writes to stdout and stderr.
	execOut string
	// onSetTags, when set, runs after SetTags stores the tags (to simulate
	// a concurrent writer).
	onSetTags func(b *fakeBox)
	// extraOnRead makes OpenFile's reader return this many more bytes than
	// the size it reports, as a file growing while read.
	extraOnRead int
	creates     int
}

type fakeBox struct {
	info  Info
	tags  map[string]string
	files map[string][]byte
	modes map[string]fs.FileMode
}

func newFake() *fakeDriver { return &fakeDriver{boxes: map[string]*fakeBox{}} }

func (f *fakeDriver) Backend() string { return "fake" }
func (f *fakeDriver) Close() error    { return nil }
func (f *fakeDriver) As(any) bool     { return false }

// Capabilities: everything but GPUs, so tests can see a refusal.
func (f *fakeDriver) Capabilities() Capabilities {
	return Capabilities{CPU: true, Memory: true, BlockNetwork: true, OpenNetwork: true, AllowHosts: true, AllowCIDRs: true, Tags: true, List: true, Lifetime: true}
}

func (f *fakeDriver) box(op, id string) (*fakeBox, error) {
	b, ok := f.boxes[id]
	if !ok {
		return nil, &Error{Op: op, Sandbox: id, Kind: ErrGone}
	}
	return b, nil
}

func (f *fakeDriver) Create(ctx context.Context, name string, spec Spec) (Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates++
	info := Info{ID: "fake-" + name, Name: name, Workdir: spec.Workdir, CreatedAt: time.Now(), ExpiresAt: ExpiresAt(spec.Tags), Tags: maps.Clone(spec.Tags)}
	f.boxes[info.ID] = &fakeBox{info: info, tags: maps.Clone(spec.Tags), files: map[string][]byte{}, modes: map[string]fs.FileMode{}}
	return info, nil
}

func (f *fakeDriver) Info(ctx context.Context, id string) (Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box("info", id)
	if err != nil {
		return Info{}, err
	}
	return b.info, nil
}

func (f *fakeDriver) Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error) {
	f.mu.Lock()
	f.lastExec = req
	_, err := f.box("exec", id)
	out := f.execOut
	f.mu.Unlock()
	if err != nil {
		return ExecResult{}, err
	}
	io.WriteString(req.Stdout, out)
	io.WriteString(req.Stderr, out)
	return ExecResult{ExitCode: 0}, nil
}

func (f *fakeDriver) OpenFile(ctx context.Context, id, path string, maxBytes int64) (io.ReadCloser, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box("read", id)
	if err != nil {
		return nil, 0, err
	}
	data, ok := b.files[path]
	if !ok {
		return nil, 0, &Error{Op: "read", Sandbox: id, Path: path, Kind: ErrNotFound}
	}
	served := append(bytes.Clone(data), bytes.Repeat([]byte("+"), f.extraOnRead)...)
	return io.NopCloser(bytes.NewReader(served)), int64(len(data)), nil
}

func (f *fakeDriver) WriteFile(ctx context.Context, id, path string, r io.Reader, mode fs.FileMode) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box("write", id)
	if err != nil {
		return err
	}
	b.files[path] = data
	b.modes[path] = mode
	return nil
}

func (f *fakeDriver) List(ctx context.Context, id, path string) ([]FileInfo, error) {
	return nil, ErrUnsupported
}

func (f *fakeDriver) Stat(ctx context.Context, id, path string) (FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box("stat", id)
	if err != nil {
		return FileInfo{}, err
	}
	data, ok := b.files[path]
	if !ok {
		return FileInfo{}, &Error{Op: "stat", Sandbox: id, Path: path, Kind: ErrNotFound}
	}
	return FileInfo{Path: path, Size: int64(len(data)), Mode: b.modes[path]}, nil
}

func (f *fakeDriver) Tags(ctx context.Context, id string) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box("tags", id)
	if err != nil {
		return nil, err
	}
	return maps.Clone(b.tags), nil
}

func (f *fakeDriver) SetTags(ctx context.Context, id string, tags map[string]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box("set tags", id)
	if err != nil {
		return err
	}
	b.tags = maps.Clone(tags)
	if f.onSetTags != nil {
		f.onSetTags(b)
	}
	return nil
}

func (f *fakeDriver) ListSandboxes(ctx context.Context, match map[string]string) ([]Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Info
	for _, b := range f.boxes {
		ok := true
		for k, v := range match {
			ok = ok && b.tags[k] == v
		}
		if ok {
			out = append(out, b.info)
		}
	}
	return out, nil
}

func (f *fakeDriver) Destroy(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.boxes[id]; !ok {
		return &Error{Op: "destroy", Sandbox: id, Kind: ErrGone}
	}
	delete(f.boxes, id)
	return nil
}

// SpecProblems: the fake's own rule, so tests see the portable layer
// apply a driver's rules.
func (f *fakeDriver) SpecProblems(spec Spec) []driver.Problem {
	if spec.Image == "refused:latest" {
		return []driver.Problem{{Field: "image", Msg: "the fake backend refuses this image"}}
	}
	return nil
}
