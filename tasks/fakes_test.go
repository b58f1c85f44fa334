package tasks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// fakeAirflow records what tasks push and mask.
type fakeAirflow struct {
	mu     sync.Mutex
	conns  map[string]connections.Connection
	vars   map[string]string
	xcoms  map[string]any
	masked []string
}

func newFakeAirflow() *fakeAirflow {
	return &fakeAirflow{conns: map[string]connections.Connection{}, vars: map[string]string{}, xcoms: map[string]any{}}
}

func (f *fakeAirflow) GetConnection(_ context.Context, id string) (connections.Connection, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.conns[id]
	if !ok {
		return connections.Connection{}, fmt.Errorf("connection %q: %w", id, connections.ErrNotFound)
	}
	return c, nil
}

func (f *fakeAirflow) GetVariable(_ context.Context, key string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.vars[key]
	if !ok {
		return "", fmt.Errorf("variable %q not found", key)
	}
	return v, nil
}

func (f *fakeAirflow) SetXCom(_ context.Context, key string, value any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.xcoms[key] = value
	return nil
}

func (f *fakeAirflow) MaskSecret(_ context.Context, value, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.masked = append(f.masked, value)
	return nil
}

// dirDriver is a test driver: each sandbox is a host directory and commands
// run with sh -c in its workdir, without isolation. Sandbox paths map under
// the sandbox directory.
type dirDriver struct {
	root string

	mu          sync.Mutex
	boxes       map[string]sandbox.Info
	env         map[string]map[string]string // the spec's env, by sandbox
	failDestroy error
	failTags    error
	creates     []sandbox.Spec
	closed      int
}

func newDirDriver(t *testing.T) *dirDriver {
	return &dirDriver{root: t.TempDir(), boxes: map[string]sandbox.Info{}, env: map[string]map[string]string{}}
}

func (d *dirDriver) Backend() string { return "local" }

func (d *dirDriver) host(id, p string) string {
	return filepath.Join(d.root, id, filepath.FromSlash(p))
}

func (d *dirDriver) live(id string) (sandbox.Info, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	info, ok := d.boxes[id]
	if !ok {
		return info, &sandbox.Error{Op: "info", Sandbox: id, Kind: sandbox.ErrGone}
	}
	return info, nil
}

func (d *dirDriver) Create(_ context.Context, name string, spec sandbox.Spec) (sandbox.Info, error) {
	if err := os.MkdirAll(d.host(name, spec.Workdir), 0o755); err != nil {
		return sandbox.Info{}, err
	}
	info := sandbox.Info{ID: name, Name: name, Backend: "local", Workdir: spec.Workdir,
		CreatedAt: time.Now(), ExpiresAt: sandbox.ExpiresAt(spec.Tags), Tags: maps.Clone(spec.Tags)}
	d.mu.Lock()
	d.boxes[name] = info
	d.env[name] = spec.Env
	d.creates = append(d.creates, spec)
	d.mu.Unlock()
	return info, nil
}

func (d *dirDriver) Info(_ context.Context, id string) (sandbox.Info, error) { return d.live(id) }

func (d *dirDriver) Exec(ctx context.Context, id string, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	info, err := d.live(id)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	wd := req.Workdir
	if wd == "" {
		wd = info.Workdir
	}
	ctx, cancel := context.WithTimeout(ctx, req.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", req.Command)
	cmd.Dir = d.host(id, wd)
	cmd.WaitDelay = 100 * time.Millisecond // sleep children keep the pipes open
	cmd.Stdout, cmd.Stderr, cmd.Stdin = req.Stdout, req.Stderr, req.Stdin
	d.mu.Lock()
	for k, v := range d.env[id] {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	d.mu.Unlock()
	for k, v := range req.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "PATH="+os.Getenv("PATH"))
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return sandbox.ExecResult{TimedOut: true, ExitCode: -1}, nil
	case errors.As(err, &ee):
		return sandbox.ExecResult{ExitCode: ee.ExitCode()}, nil
	case err != nil:
		return sandbox.ExecResult{}, err
	}
	return sandbox.ExecResult{}, nil
}

func (d *dirDriver) OpenFile(_ context.Context, id, p string, maxBytes int64) (io.ReadCloser, int64, error) {
	if _, err := d.live(id); err != nil {
		return nil, 0, err
	}
	f, err := os.Open(d.host(id, p))
	if err != nil {
		return nil, 0, &sandbox.Error{Op: "read", Sandbox: id, Path: p, Kind: sandbox.ErrNotFound}
	}
	st, _ := f.Stat()
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, &sandbox.Error{Op: "read", Sandbox: id, Path: p, Kind: sandbox.ErrNotRegular}
	}
	if maxBytes >= 0 && st.Size() > maxBytes {
		f.Close()
		return nil, 0, &sandbox.TooLargeError{Path: p, Size: st.Size(), MaxBytes: maxBytes}
	}
	return f, st.Size(), nil
}

func (d *dirDriver) WriteFile(_ context.Context, id, p string, r io.Reader, mode fs.FileMode) error {
	if _, err := d.live(id); err != nil {
		return err
	}
	h := d.host(id, p)
	if err := os.MkdirAll(filepath.Dir(h), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(h, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (d *dirDriver) List(context.Context, string, string) ([]sandbox.FileInfo, error) {
	return nil, sandbox.ErrUnsupported
}

func (d *dirDriver) Stat(_ context.Context, id, p string) (sandbox.FileInfo, error) {
	if _, err := d.live(id); err != nil {
		return sandbox.FileInfo{}, err
	}
	st, err := os.Lstat(d.host(id, p))
	if err != nil {
		return sandbox.FileInfo{}, &sandbox.Error{Op: "stat", Sandbox: id, Path: p, Kind: sandbox.ErrNotFound}
	}
	return sandbox.FileInfo{Name: st.Name(), Path: p, Size: st.Size(), Mode: st.Mode()}, nil
}

func (d *dirDriver) Tags(_ context.Context, id string) (map[string]string, error) {
	if d.failTags != nil {
		return nil, d.failTags
	}
	info, err := d.live(id)
	return maps.Clone(info.Tags), err
}

func (d *dirDriver) SetTags(_ context.Context, id string, tags map[string]string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	info, ok := d.boxes[id]
	if !ok {
		return sandbox.ErrGone
	}
	info.Tags = maps.Clone(tags)
	d.boxes[id] = info
	return nil
}

func (d *dirDriver) ListSandboxes(_ context.Context, match map[string]string) ([]sandbox.Info, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []sandbox.Info
	for _, info := range d.boxes {
		ok := true
		for k, v := range match {
			ok = ok && info.Tags[k] == v
		}
		if ok {
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (d *dirDriver) Destroy(_ context.Context, id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failDestroy != nil {
		return d.failDestroy
	}
	delete(d.boxes, id)
	return os.RemoveAll(filepath.Join(d.root, id))
}

func (d *dirDriver) Close() error {
	d.mu.Lock()
	d.closed++
	d.mu.Unlock()
	return nil
}

func (d *dirDriver) alive() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []string
	for id := range d.boxes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// opener returns a DriverOpener that hands out d and records requests.
func (d *dirDriver) opener(reqs *[]DriverRequest) DriverOpener {
	return func(_ context.Context, req DriverRequest) (sandbox.Driver, error) {
		if reqs != nil {
			*reqs = append(*reqs, req)
		}
		return d, nil
	}
}

// memStorage is an in-memory Storage with Export's staging semantics and
// failure injection.
type memStorage struct {
	mu        sync.Mutex
	objects   map[string][]byte
	staged    map[string][]byte
	failStage map[string]error // by destination URL
	failCheck map[string]error // by URL: Check refuses it
	failOpen  map[string]error // by URL: Open fails, though Check passed
	aborts    int
	// beforeStage, when set, runs as a Stage starts, before it reads.
	beforeStage func(dest string)
}

func newMemStorage() *memStorage {
	return &memStorage{objects: map[string][]byte{}, staged: map[string][]byte{}, failStage: map[string]error{}, failCheck: map[string]error{}, failOpen: map[string]error{}}
}

func (m *memStorage) Open(_ context.Context, url string, _ StorageCreds, _ hclog.Logger) (io.ReadCloser, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.failOpen[url]; err != nil {
		return nil, err
	}
	b, ok := m.objects[url]
	if !ok {
		return nil, fmt.Errorf("%s: object not found", url)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// Check refuses what failCheck names, as a store refuses a missing bucket.
func (m *memStorage) Check(_ context.Context, url string, forRead bool, _ StorageCreds) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.failCheck[url]; err != nil {
		return err
	}
	if _, ok := m.objects[url]; forRead && !ok {
		return fmt.Errorf("%s: object not found", url)
	}
	return nil
}

func (m *memStorage) NewExport(StorageCreds, hclog.Logger, int) Exporter {
	return &memExport{m: m, mine: map[string]bool{}}
}

type memExport struct {
	m    *memStorage
	mine map[string]bool
}

func (e *memExport) Stage(_ context.Context, dest string, r io.Reader, size int64) (int64, error) {
	if e.m.beforeStage != nil {
		e.m.beforeStage(dest)
	}
	b, err := io.ReadAll(r)
	e.m.mu.Lock()
	defer e.m.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if size >= 0 && int64(len(b)) != size {
		return 0, fmt.Errorf("%s: %d bytes streamed, %d announced: %w", dest, len(b), size, storage.ErrChanged)
	}
	if ferr := e.m.failStage[dest]; ferr != nil {
		e.m.staged[dest+".partial"] = b[:len(b)/2] // half-written, as a real failure leaves it
		e.mine[dest] = true
		return 0, ferr
	}
	e.m.staged[dest+".partial"] = b
	e.mine[dest] = true
	return int64(len(b)), nil
}

func (e *memExport) Commit(context.Context) ([]string, error) {
	e.m.mu.Lock()
	defer e.m.mu.Unlock()
	var urls []string
	for dest := range e.mine {
		e.m.objects[dest] = e.m.staged[dest+".partial"]
		delete(e.m.staged, dest+".partial")
		urls = append(urls, dest)
	}
	sort.Strings(urls)
	return urls, nil
}

func (e *memExport) Abort(context.Context) error {
	e.m.mu.Lock()
	defer e.m.mu.Unlock()
	e.m.aborts++
	for dest := range e.mine {
		delete(e.m.staged, dest+".partial")
	}
	return nil
}

// logBuffer captures the task log.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// env is one test's world: Airflow, a driver, storage and the log.
type env struct {
	af   *fakeAirflow
	drv  *dirDriver
	st   *memStorage
	log  *logBuffer
	reqs []DriverRequest
	deps Deps
}

func newEnv(t *testing.T) *env {
	e := &env{af: newFakeAirflow(), drv: newDirDriver(t), st: newMemStorage(), log: &logBuffer{}}
	e.deps = Deps{
		Airflow: e.af,
		Run:     Run{DagID: "dag_a", RunID: "manual__2026-11-29T10:00:00+00:00", TaskID: "t", MapIndex: -1},
		Logger:  hclog.New(&hclog.LoggerOptions{Output: e.log, Level: hclog.Debug}),
		Drivers: e.drv.opener(&e.reqs),
		Storage: e.st,
	}
	return e
}
