package fakemodal

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	modal "github.com/modal-labs/modal-client/go"
	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/local"
	"github.com/airflow-sandbox/airflow-go-worker/testing/eventually"
)

// newClient starts a fake and a real SDK client pointed at it.
func newClient(t *testing.T) (*Server, *modal.Client) {
	t.Helper()
	s := Start(t, Options{})
	s.SetEnv(t)
	c, err := modal.NewClientWithOptions(&modal.ClientParams{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return s, c
}

func create(t *testing.T, c *modal.Client, params *modal.SandboxCreateParams) *modal.Sandbox {
	t.Helper()
	ctx := context.Background()
	app, err := c.Apps.FromName(ctx, "fake-test", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandboxes.Create(ctx, app, c.Images.FromRegistry("python:3.12-slim", nil), params)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

func run(t *testing.T, sb *modal.Sandbox, params *modal.SandboxExecParams, args ...string) (string, string, int, error) {
	t.Helper()
	ctx := context.Background()
	p, err := sb.Exec(ctx, args, params)
	if err != nil {
		t.Fatal(err)
	}
	p.Stdin.Close()
	out, _ := io.ReadAll(p.Stdout)
	errb, _ := io.ReadAll(p.Stderr)
	code, err := p.Wait(ctx, nil)
	return string(out), string(errb), code, err
}

func TestSDKCreateExecTerminate(t *testing.T) {
	s, c := newClient(t)
	sb := create(t, c, &modal.SandboxCreateParams{Workdir: "/workspace", Env: map[string]string{"FOO": "bar"}, Tags: map[string]string{"k": "v"}})
	if !strings.HasPrefix(sb.SandboxID, "sb-") || len(sb.SandboxID) == 25 {
		t.Fatalf("sandbox id %q is not V2-shaped", sb.SandboxID)
	}
	out, errOut, code, err := run(t, sb, nil, "sh", "-c", `echo "out $FOO $PWD"; echo err >&2; exit 3`)
	if err != nil || out != "out bar /workspace\n" || errOut != "err\n" || code != 3 {
		t.Fatalf("got out=%q err=%q code=%d %v", out, errOut, code, err)
	}
	if got := s.Sandboxes(); len(got) != 1 || got[0].Tags["k"] != "v" {
		t.Fatalf("Sandboxes() = %+v", got)
	}
	if got := s.Execs(); len(got) != 1 || got[0].SandboxID != sb.SandboxID || !slices.Equal(got[0].Args, []string{"sh", "-c", `echo "out $FOO $PWD"; echo err >&2; exit 3`}) {
		t.Fatalf("Execs() = %+v, want the one command, in sandbox %s", got, sb.SandboxID)
	}
	code, err = sb.Terminate(context.Background(), &modal.SandboxTerminateParams{Wait: true})
	if err != nil || code != 137 {
		t.Fatalf("terminate: %d %v", code, err)
	}
	if got := s.Sandboxes(); len(got) != 0 {
		t.Fatalf("terminated sandbox still listed: %+v", got)
	}
}

func TestSDKExecTimeoutIsSignal9(t *testing.T) {
	_, c := newClient(t)
	sb := create(t, c, nil)
	// A timeout not enforced would end with the sleep: exit 0.
	_, _, code, err := run(t, sb, &modal.SandboxExecParams{Timeout: time.Second}, "sleep", "30")
	var te modal.ExecTimeoutError
	if !(code == 137 || errors.As(err, &te)) {
		t.Fatalf("want 137 or ExecTimeoutError, got %d %v", code, err)
	}
}

func TestSDKStdinAndFilesystem(t *testing.T) {
	_, c := newClient(t)
	sb := create(t, c, nil)
	ctx := context.Background()
	p, err := sb.Exec(ctx, []string{"cat"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(p.Stdin, "hello ")
	io.WriteString(p.Stdin, "stdin")
	p.Stdin.Close()
	out, _ := io.ReadAll(p.Stdout)
	if code, err := p.Wait(ctx, nil); code != 0 || err != nil || string(out) != "hello stdin" {
		t.Fatalf("cat: %q %d %v", out, code, err)
	}

	data := bytes.Repeat([]byte{0, 1, 2, 255}, 300_000)
	if err := sb.Filesystem.WriteBytes(ctx, data, "/workspace/d/f.bin", nil); err != nil {
		t.Fatal(err)
	}
	got, err := sb.Filesystem.ReadBytes(ctx, "/workspace/d/f.bin", nil)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, %v", len(got), err)
	}
	list, err := sb.Filesystem.ListFiles(ctx, "/workspace", nil)
	if err != nil || len(list) != 1 || list[0].Type != modal.FileTypeDirectory || list[0].Name != "d" {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := sb.Filesystem.MakeDirectory(ctx, "/workspace/a/b", nil); err != nil {
		t.Fatal(err)
	}
	if fi, err := sb.Filesystem.Stat(ctx, "/workspace/a/b", nil); err != nil || fi.Type != modal.FileTypeDirectory {
		t.Fatalf("stat of a made directory: %+v %v", fi, err)
	}
	if err := sb.Filesystem.Remove(ctx, "/workspace/a", &modal.SandboxFilesystemRemoveParams{Recursive: true}); err != nil {
		t.Fatal(err)
	}
	err = sb.Filesystem.Remove(ctx, "/workspace/a", nil)
	var nfRemove modal.SandboxFilesystemNotFoundError
	if !errors.As(err, &nfRemove) {
		t.Fatalf("removing a missing path: %v", err)
	}
	_, err = sb.Filesystem.Stat(ctx, "/workspace/missing", nil)
	var nf modal.SandboxFilesystemNotFoundError
	if !errors.As(err, &nf) {
		t.Fatalf("stat missing: %v", err)
	}
}

func TestSDKTagsListAndPaging(t *testing.T) {
	s, c := newClient(t)
	ctx := context.Background()
	app, err := c.Apps.FromName(ctx, "fake-test", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = listPage + 5 // two pages
	for i := 0; i < n; i++ {
		create(t, c, &modal.SandboxCreateParams{Tags: map[string]string{"group": "a"}})
	}
	other := create(t, c, &modal.SandboxCreateParams{Tags: map[string]string{"group": "b"}})
	if err := other.SetTags(ctx, map[string]string{"group": "c", "x": "y"}, nil); err != nil {
		t.Fatal(err)
	}
	tags, err := other.GetTags(ctx, nil)
	if err != nil || len(tags) != 2 || tags["group"] != "c" {
		t.Fatalf("tags: %v %v", tags, err)
	}
	it, err := c.Sandboxes.List(ctx, &modal.SandboxListParams{AppID: app.AppID, Tags: map[string]string{"group": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for sb, err := range it {
		if err != nil {
			t.Fatal(err)
		}
		seen[sb.SandboxID] = true
	}
	if len(seen) != n {
		t.Fatalf("listed %d sandboxes, want %d", len(seen), n)
	}
	if s.Calls("SandboxListV2") != 3 {
		t.Fatalf("want 2 pages + the empty one, got %d calls", s.Calls("SandboxListV2"))
	}
}

func TestSDKLifetimeAndFaults(t *testing.T) {
	s, c := newClient(t)
	ctx := context.Background()
	sb := create(t, c, &modal.SandboxCreateParams{Timeout: 1 * time.Second})
	code, err := sb.Wait(ctx, nil)
	if err != nil || code != 124 {
		t.Fatalf("lifetime end: %d %v", code, err)
	}

	s.FailNext("AppGetOrCreate", 1, codes.PermissionDenied)
	_, err = c.Apps.FromName(ctx, "other", &modal.AppFromNameParams{CreateIfMissing: true})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("want injected PermissionDenied, got %v", err)
	}
	_, err = c.Apps.FromName(ctx, "never-created", nil)
	var nf modal.NotFoundError
	if !errors.As(err, &nf) {
		t.Fatalf("want NotFound for a missing app, got %v", err)
	}

	sb2 := create(t, c, nil)
	s.DropStdioStreams(3, 2)
	out, _, code, err := run(t, sb2, nil, "sh", "-c", "echo 0123456789")
	if err != nil || code != 0 || out != "0123456789\n" {
		t.Fatalf("resumed output %q %d %v", out, code, err)
	}

	p, err := sb2.Exec(ctx, []string{"sleep", "30"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.KillSandbox(sb2.SandboxID); err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(ctx, nil); err != nil || code != 137 {
		t.Fatalf("command in a killed sandbox: %d %v", code, err)
	}
	if got, err := sb2.Poll(ctx, nil); err != nil || got == nil {
		t.Fatalf("poll of a killed sandbox: %v %v", got, err)
	}
}

// FailCommands ends only the commands it picks (here: those of one
// owner's sandbox that touch marker), without running them; the same
// command elsewhere, and other commands in that sandbox, run.
func TestSDKFailCommands(t *testing.T) {
	s, c := newClient(t)
	picked := create(t, c, &modal.SandboxCreateParams{Tags: map[string]string{"owner": "d/r1"}})
	other := create(t, c, &modal.SandboxCreateParams{Tags: map[string]string{"owner": "d/r2"}})
	s.FailCommands(7, func(tags map[string]string, args []string) bool {
		return tags["owner"] == "d/r1" && strings.Contains(strings.Join(args, " "), "marker")
	})
	cmd := "touch ran; echo marker"
	out, errOut, code, err := run(t, picked, nil, "sh", "-c", cmd)
	if err != nil || code != 7 || out != "" || !strings.Contains(errOut, "FailCommands") {
		t.Fatalf("picked command: out=%q err=%q code=%d %v; want exit 7, no output, the fault named on stderr", out, errOut, code, err)
	}
	if out, _, code, err := run(t, picked, nil, "sh", "-c", "ls"); err != nil || code != 0 || strings.Contains(out, "ran") {
		t.Fatalf("another command in the picked sandbox: out=%q code=%d %v; want it to run, and the picked one never to have", out, code, err)
	}
	if out, _, code, err := run(t, other, nil, "sh", "-c", cmd); err != nil || code != 0 || out != "marker\n" {
		t.Fatalf("the same command in another owner's sandbox: out=%q code=%d %v; want it to run", out, code, err)
	}
	got := s.FailedCommands()
	if len(got) != 1 || got[0].SandboxID != picked.SandboxID || !slices.Equal(got[0].Args, []string{"sh", "-c", cmd}) {
		t.Fatalf("FailedCommands() = %+v, want the one picked command in %s", got, picked.SandboxID)
	}
	s.FailCommands(0, nil)
	if _, errOut, code, err := run(t, picked, nil, "sh", "-c", cmd); err != nil || code != 0 {
		t.Fatalf("after FailCommands(0, nil) the command exits %d %v (stderr %q); want it to run", code, err, errOut)
	}
}

func TestBadTokenIsUnauthenticated(t *testing.T) {
	s := Start(t, Options{})
	s.SetEnv(t)
	t.Setenv("MODAL_TOKEN_SECRET", "wrong")
	c, err := modal.NewClientWithOptions(&modal.ClientParams{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Apps.FromName(context.Background(), "x", &modal.AppFromNameParams{CreateIfMissing: true})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("want Unauthenticated, got %v", err)
	}
}

// A held create makes its sandbox, waits until released, then answers; a
// caller that gives up while held leaves the sandbox behind, as a client
// killed mid-create does on Modal.
func TestSDKHoldCreates(t *testing.T) {
	s, c := newClient(t)
	release := s.HoldCreates()
	defer release()
	app, err := c.Apps.FromName(context.Background(), "fake-test", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	image := c.Images.FromRegistry("python:3.12-slim", nil)
	created := make(chan error, 1)
	go func() {
		_, err := c.Sandboxes.Create(context.Background(), app, image, &modal.SandboxCreateParams{Tags: map[string]string{"who": "held"}})
		created <- err
	}()
	held := waitHeld(t, s, 1)
	if held[0].Tags["who"] != "held" {
		t.Fatalf("held create carries tags %v", held[0].Tags)
	}
	if live := s.Sandboxes(); len(live) != 1 || live[0].ID != held[0].SandboxID {
		t.Fatalf("a held create's sandbox is not live: %+v", live)
	}
	select {
	case err := <-created:
		t.Fatalf("create answered while held: %v", err)
	default:
	}

	ctx, cancel := context.WithCancel(context.Background())
	abandoned := make(chan error, 1)
	go func() {
		_, err := c.Sandboxes.Create(ctx, app, image, nil)
		abandoned <- err
	}()
	waitHeld(t, s, 2)
	cancel()
	if err := <-abandoned; err == nil {
		t.Fatal("a create whose caller gave up succeeded")
	}
	waitHeld(t, s, 1)

	release()
	if err := <-created; err != nil {
		t.Fatalf("released create: %v", err)
	}
	if live := s.Sandboxes(); len(live) != 2 {
		t.Fatalf("want the released sandbox and the abandoned one live, got %+v", live)
	}
	release()         // a second call is harmless
	create(t, c, nil) // and creates no longer wait
}

// waitHeld waits until n creates are held, failing after a generous bound.
func waitHeld(t *testing.T, s *Server, n int) []CreateRecord {
	t.Helper()
	var held []CreateRecord
	if !eventually.Holds(t, func() bool {
		held = s.HeldCreates()
		return len(held) == n
	}) {
		t.Fatalf("%d creates held, want %d", len(held), n)
	}
	return held
}

// TestTerminateIsRecordedBeforeItsAnswer: once SandboxTerminateV2 has
// answered, the sandbox counts as finished. When the fake recorded that in
// a goroutine of its own, a leak check right after a driver's Destroy could
// still find the sandbox running on a loaded machine.
func TestTerminateIsRecordedBeforeItsAnswer(t *testing.T) {
	s, c := newClient(t)
	sb := create(t, c, nil)
	s.mu.Lock()
	fsb := s.sandboxes[sb.SandboxID]
	s.mu.Unlock()
	if got := s.Sandboxes(); len(got) != 1 || fsb == nil {
		t.Fatalf("before terminate: Sandboxes() = %+v", got)
	}
	// The handler is called in-process on one P: a goroutine it starts
	// cannot run before this one blocks, so anything it defers to a
	// goroutine is still undone when the checks below run.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ctrl := &control{s: s}
	if _, err := ctrl.SandboxTerminateV2(context.Background(), pb.SandboxTerminateRequest_builder{SandboxId: sb.SandboxID}.Build()); err != nil {
		t.Fatal(err)
	}
	live := s.Sandboxes()
	waited, err := ctrl.SandboxWaitV2(context.Background(), pb.SandboxWaitRequest_builder{SandboxId: sb.SandboxID}.Build())
	if len(live) != 0 {
		t.Errorf("a sandbox whose terminate was answered is still listed running: %+v", live)
	}
	if err != nil || waited.GetResult().GetStatus() != pb.GenericResult_GENERIC_STATUS_TERMINATED {
		t.Errorf("wait right after terminate: %v, %v; want TERMINATED", waited.GetResult(), err)
	}
	// The teardown still happens, in the background.
	deadline.Wait(t, "the terminated sandbox's processes and files to be destroyed", fsb.destroyed)
}

// slowExec passes Exec calls to a real exec driver and returns from them
// late, as on a loaded machine, counting the calls still inside.
type slowExec struct {
	driver.Driver
	started  chan struct{} // a value per Exec entered
	inflight atomic.Int32
}

func (d *slowExec) Exec(ctx context.Context, id string, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	d.inflight.Add(1)
	defer d.inflight.Add(-1)
	d.started <- struct{}{}
	res, err := d.Driver.Exec(ctx, id, req)
	// Widens the window in which a killed command is still returning; the
	// fixed Close passes however long this is.
	time.Sleep(300 * time.Millisecond)
	return res, err
}

// TestCloseWaitsForCommandsInTheExecDriver: when Close returns, no command
// of the fake is still inside the exec driver, which the caller (or Close
// itself) then closes. The local driver panicked when closed under an Exec
// that was returning ("WaitGroup is reused before previous Wait has
// returned"), seen in sandbox/modal's TestExecCancelAndPerCommandOptions.
func TestCloseWaitsForCommandsInTheExecDriver(t *testing.T) {
	inner, err := local.New(local.Options{Root: t.TempDir(), IgnoreImage: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	exec := &slowExec{Driver: inner, started: make(chan struct{}, 1)}
	s := Start(t, Options{Exec: exec})
	s.SetEnv(t)
	c, err := modal.NewClientWithOptions(&modal.ClientParams{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	sb := create(t, c, nil)
	if _, err := sb.Exec(context.Background(), []string{"sleep", "600"}, nil); err != nil {
		t.Fatal(err)
	}
	deadline.Wait(t, "the command to reach the exec driver", exec.started)
	s.Close()
	if n := exec.inflight.Load(); n != 0 {
		t.Fatalf("Close returned while %d command(s) were still inside the exec driver", n)
	}
}

// countingExec counts the commands inside the exec driver.
type countingExec struct {
	driver.Driver
	inflight atomic.Int32
}

func (d *countingExec) Exec(ctx context.Context, id string, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	d.inflight.Add(1)
	defer d.inflight.Add(-1)
	return d.Driver.Exec(ctx, id, req)
}

// What an exec starts in the background lives on after the exec has
// ended, as in a Modal container, until the sandbox ends: the exec itself
// reports its exit at once (its output ends, although a background
// process still holds it), a later exec wakes the background process
// through a file, and terminating the sandbox ends what still runs.
func TestSDKBackgroundProcessesLiveUntilTheSandboxEnds(t *testing.T) {
	inner, err := local.New(local.Options{Root: t.TempDir(), IgnoreImage: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	exec := &countingExec{Driver: inner}
	s := Start(t, Options{Exec: exec})
	s.SetEnv(t)
	c, err := modal.NewClientWithOptions(&modal.ClientParams{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	sb := create(t, c, nil)
	out, errOut, code, err := run(t, sb, nil, "sh", "-c",
		`(while [ ! -f /tmp/go ]; do sleep 0.05; done; echo alive >/tmp/alive) >/dev/null 2>&1 & sleep 600 & echo started; echo to-err >&2; exit 7`)
	if err != nil || code != 7 || out != "started\n" || errOut != "to-err\n" {
		t.Fatalf("the exec that left processes behind: out %q err %q code %d %v", out, errOut, code, err)
	}
	if _, _, code, err := run(t, sb, nil, "touch", "/tmp/go"); code != 0 || err != nil {
		t.Fatalf("touch: %d %v", code, err)
	}
	eventually.True(t, "the background process to answer the file", func() bool {
		out, _, code, _ := run(t, sb, nil, "cat", "/tmp/alive")
		return code == 0 && out == "alive\n"
	})
	// The later execs' namespaces end with them; the first one's stays,
	// held by its sleep.
	eventually.True(t, "one command left in the exec driver", func() bool { return exec.inflight.Load() == 1 })
	if _, err := sb.Terminate(context.Background(), &modal.SandboxTerminateParams{Wait: true}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "terminating the sandbox to end its background processes", func() bool { return exec.inflight.Load() == 0 })
	if got := s.Sandboxes(); len(got) != 0 {
		t.Fatalf("terminated sandbox still listed: %+v", got)
	}
}
