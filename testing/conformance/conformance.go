// Package conformance is the test suite every sandbox driver must pass. A
// driver's own test calls Run with a factory; the suite then checks the whole
// contract through the portable sandbox API only (sandbox.Create, Open,
// Attach, Release), running nothing inside the sandboxes but POSIX sh,
// coreutils and bash, so that it is backend-neutral.
//
// A driver's test:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(t *testing.T) driver.Driver {
//			d := newDriverForTest(t) // registers its own t.Cleanup
//			return d
//		}, conformance.Options{
//			SupportsTags: true,
//			RefusedSpec:  &sandbox.Spec{CPU: 1000}, // something it must refuse
//		})
//	}
//
// Backends whose fake servers run commands as local processes can get real
// isolation (no network, clean env, private files) by running those
// commands through sandbox/local.
package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
	"github.com/airflow-sandbox/airflow-go-worker/testing/memwatch"
)

// Options declare what the backend under test can do.
type Options struct {
	// Spec is the template every test sandbox is created from (image,
	// memory, ...). Network, Owner and Tags are set by the tests that need
	// them. Zero is fine for backends whose default image has bash and
	// coreutils.
	Spec sandbox.Spec
	// SupportsTags, when set, must agree with Capabilities().Tags (the
	// suite reads the capability; this only cross-checks a driver test's
	// expectation). With tags, ownership tags, Attach and Release are
	// tested; without, Tags must return ErrUnsupported.
	SupportsTags bool
	// RefusedSpec is a spec this backend must refuse before provisioning
	// anything (for local: a CIDR allowlist). Nil skips that test.
	RefusedSpec *sandbox.Spec
	// CountProvisioned counts what the backend has provisioned, for the
	// refused-spec tests. Default: the number sandbox.Backend.List(ctx, nil) lists.
	CountProvisioned func(ctx context.Context, drv driver.Driver) (int, error)
	// ProbeTarget listens where a sandbox could connect if its network
	// were not blocked: the no-network test probes it from a blocked
	// sandbox. Default: the test host's 127.0.0.1, which a sandbox reaches
	// only when it shares the test host's network (what a process-based
	// backend's sandbox would do without its network namespace). A
	// sandbox in a container has a 127.0.0.1 of its own, so a
	// container backend must give a listener on the host side of the
	// containers' bridge (or in another container).
	ProbeTarget func(t *testing.T) net.Listener
	// OpenNetworkReachesTarget: a sandbox with Network{Open: true}
	// connects to ProbeTarget. When true, the no-network test starts with
	// this positive control, which proves that its probe would notice a
	// connection; when false, the driver's own tests must prove it (name
	// them in a comment).
	OpenNetworkReachesTarget bool
	// HostWorkdir returns the host directory backing a sandbox's workdir,
	// if there is one; the isolation test then tries that path from another
	// sandbox too.
	HostWorkdir func(id string) string
	// BigFileSize is the size of the bounded-memory streaming test. Default
	// 256 MiB; negative skips it.
	BigFileSize int64
	// MaxHeapGrowth bounds heap growth while streaming the big file.
	// Default 64 MiB.
	MaxHeapGrowth uint64
	// DetachedCombinedOutput: the backend keeps a detached command's
	// stdout and stderr as one stream, which a poll reports as Stdout, in
	// the order written (OpenSandbox's execd). RunDetached only.
	DetachedCombinedOutput bool
	// CallBound is the Timeout of each command the suite runs unless the
	// test sets its own. Default 2 minutes. Waits for a call to return have
	// no fixed limit, which a loaded host can miss: a call that hangs fails
	// its test near the test binary's deadline (testing/deadline).
	CallBound time.Duration
}

func (o *Options) defaults() {
	if o.BigFileSize == 0 {
		o.BigFileSize = 256 << 20
	}
	if o.MaxHeapGrowth == 0 {
		o.MaxHeapGrowth = 64 << 20
	}
	if o.CallBound == 0 {
		o.CallBound = 2 * time.Minute
	}
	if o.CountProvisioned == nil {
		o.CountProvisioned = func(ctx context.Context, drv driver.Driver) (int, error) {
			l, err := sandbox.NewBackend(drv).List(ctx, nil)
			return len(l), err
		}
	}
}

// Run runs the suite. newDriver is called once per subtest; it should
// register its own cleanup on t.
func Run(t *testing.T, newDriver func(t *testing.T) driver.Driver, opts Options) {
	opts.defaults()
	s := &suite{opts: opts, newDriver: newDriver}
	tests := []struct {
		name string
		fn   func(t *testing.T, drv driver.Driver)
	}{
		{"Info", s.testInfo},
		{"ExitCodesAndStreams", s.testExitCodesAndStreams},
		{"TimeoutKeepsSandbox", s.testTimeout},
		{"ParentEnvDoesNotLeak", s.testParentEnv},
		{"NoNetworkByDefault", s.testNoNetwork},
		{"FilesRoundTrip", s.testFilesRoundTrip},
		{"BigFileBoundedMemory", s.testBigFile},
		{"TypedFileErrors", s.testTypedErrors},
		{"ListAndStat", s.testListAndStat},
		{"DestroyTwiceAndGone", s.testDestroy},
		{"SandboxesIsolated", s.testIsolation},
		{"RefusedSpecProvisionsNothing", s.testRefused},
		{"CapabilitiesMatchTheDriver", s.testCapabilities},
		{"Tags", s.testTags},
		{"AttachRelease", s.testAttach},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newDriver(t)) })
	}
}

type suite struct {
	opts      Options
	newDriver func(t *testing.T) driver.Driver
}

// ctx bounds one test's calls by the test binary's deadline, so a hang
// fails instead of stalling.
func (s *suite) ctx(t *testing.T) context.Context { return deadline.Context(t) }

func (s *suite) create(t *testing.T, drv driver.Driver, edit func(*sandbox.Spec)) *sandbox.Sandbox {
	t.Helper()
	spec := s.opts.Spec
	spec.Env = maps.Clone(spec.Env)
	spec.Tags = maps.Clone(spec.Tags)
	if edit != nil {
		edit(&spec)
	}
	sb, err := sandbox.NewBackend(drv).Create(s.ctx(t), spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(context.Background()); err != nil {
			t.Errorf("destroy %s: %v", sb.ID(), err)
		}
	})
	return sb
}

type execOut struct {
	res            sandbox.ExecResult
	stdout, stderr string
}

func (s *suite) exec(t *testing.T, sb *sandbox.Sandbox, cmd string, opt sandbox.ExecOptions) execOut {
	t.Helper()
	var out, errb bytes.Buffer
	opt.Stdout, opt.Stderr = &out, &errb
	if opt.Timeout == 0 {
		opt.Timeout = s.opts.CallBound
	}
	res, err := sb.Exec(s.ctx(t), cmd, opt)
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	return execOut{res, out.String(), errb.String()}
}

func (s *suite) mustSucceed(t *testing.T, sb *sandbox.Sandbox, cmd string) string {
	t.Helper()
	o := s.exec(t, sb, cmd, sandbox.ExecOptions{})
	if o.res.ExitCode != 0 || o.res.TimedOut {
		t.Fatalf("exec %q: exit %d (timed out %v), stderr %q", cmd, o.res.ExitCode, o.res.TimedOut, o.stderr)
	}
	return o.stdout
}

func (s *suite) testInfo(t *testing.T, drv driver.Driver) {
	before := time.Now()
	sb := s.create(t, drv, func(sp *sandbox.Spec) { sp.Lifetime = 10 * time.Minute; sp.Workdir = "/workspace" })
	// A fresh handle asks the backend instead of the cached create result.
	info, err := sandbox.NewBackend(drv).Open(sb.ID()).Info(s.ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != sb.ID() || info.Backend != drv.Backend() {
		t.Errorf("info id %q backend %q, want %q %q", info.ID, info.Backend, sb.ID(), drv.Backend())
	}
	if !strings.HasPrefix(info.Name, sandbox.NamePrefix) {
		t.Errorf("name %q does not start with %s", info.Name, sandbox.NamePrefix)
	}
	if info.Workdir != "/workspace" {
		t.Errorf("workdir %q, want /workspace", info.Workdir)
	}
	if lo, hi := before.Add(10*time.Minute-2*time.Second), time.Now().Add(10*time.Minute+2*time.Second); info.ExpiresAt.Before(lo) || info.ExpiresAt.After(hi) {
		t.Errorf("expires at %v, want about 10 minutes from now", info.ExpiresAt)
	}
	if pwd := s.mustSucceed(t, sb, "pwd"); pwd != "/workspace\n" {
		t.Errorf("commands start in %q, want the workdir /workspace", pwd)
	}
}

func (s *suite) testExitCodesAndStreams(t *testing.T, drv driver.Driver) {
	sb := s.create(t, drv, nil)
	o := s.exec(t, sb, "echo to-out; echo to-err >&2; exit 3", sandbox.ExecOptions{})
	if o.res.ExitCode != 3 || o.stdout != "to-out\n" || o.stderr != "to-err\n" || o.res.TimedOut {
		t.Errorf("got exit %d out %q err %q timed out %v; want 3, \"to-out\\n\", \"to-err\\n\"", o.res.ExitCode, o.stdout, o.stderr, o.res.TimedOut)
	}
	if o := s.exec(t, sb, "true", sandbox.ExecOptions{}); o.res.ExitCode != 0 || o.stdout != "" || o.stderr != "" {
		t.Errorf("true: exit %d out %q err %q", o.res.ExitCode, o.stdout, o.stderr)
	}
	o = s.exec(t, sb, "tr a-z A-Z", sandbox.ExecOptions{Stdin: strings.NewReader("from stdin")})
	if o.stdout != "FROM STDIN" {
		t.Errorf("stdin: got %q", o.stdout)
	}
	// No stdin means an empty one: a command reading it ends at once rather
	// than waiting out its deadline. The script's second line shows it still
	// runs as a whole script.
	o = s.exec(t, sb, "wc -c\necho read-all", sandbox.ExecOptions{Timeout: 30 * time.Second})
	if f := strings.Fields(o.stdout); o.res.TimedOut || o.res.ExitCode != 0 || len(f) == 0 || f[0] != "0" || !strings.HasSuffix(o.stdout, "read-all\n") {
		t.Errorf("nil stdin: exit %d timed out %v out %q; want 0 bytes read, then read-all", o.res.ExitCode, o.res.TimedOut, o.stdout)
	}
	o = s.exec(t, sb, `mkdir -p sub && cd sub && pwd && echo "$PER_EXEC"`, sandbox.ExecOptions{Env: map[string]string{"PER_EXEC": "v 1"}})
	if !strings.HasSuffix(o.stdout, "/sub\nv 1\n") {
		t.Errorf("per-exec env: got %q", o.stdout)
	}
	o = s.exec(t, sb, "pwd", sandbox.ExecOptions{Workdir: "sub"})
	if !strings.HasSuffix(o.stdout, "/sub\n") {
		t.Errorf("per-exec workdir: pwd = %q", o.stdout)
	}
	// 100000 bytes of output, capped at 1000 each: the cap is reported.
	o = s.exec(t, sb, "head -c 100000 /dev/zero | tr '\\0' x; head -c 100000 /dev/zero | tr '\\0' y >&2", sandbox.ExecOptions{MaxOutputBytes: 1000})
	if len(o.stdout) != 1000 || len(o.stderr) != 1000 || !o.res.StdoutTruncated || !o.res.StderrTruncated || o.res.ExitCode != 0 {
		t.Errorf("capped output: %d/%d bytes, truncated %v/%v, exit %d", len(o.stdout), len(o.stderr), o.res.StdoutTruncated, o.res.StderrTruncated, o.res.ExitCode)
	}
}

func (s *suite) testTimeout(t *testing.T, drv driver.Driver) {
	sb := s.create(t, drv, nil)
	s.mustSucceed(t, sb, "echo kept > kept.txt")
	// A timeout not enforced would come back after the sleep, not timed out.
	o := s.exec(t, sb, "echo started; sleep 600 & sleep 600", sandbox.ExecOptions{Timeout: 2 * time.Second})
	if !o.res.TimedOut {
		t.Fatalf("want TimedOut, got %+v", o.res)
	}
	if o.res.AppliedTimeout != 2*time.Second {
		t.Errorf("applied timeout %v, want 2s", o.res.AppliedTimeout)
	}
	if o.res.SandboxLost {
		t.Errorf("a command timeout lost the sandbox")
	}
	if got := s.mustSucceed(t, sb, "cat kept.txt"); got != "kept\n" {
		t.Errorf("after the timeout kept.txt = %q", got)
	}
}

func (s *suite) testParentEnv(t *testing.T, drv driver.Driver) {
	name := "CONFORMANCE_SENTINEL_" + strings.ToUpper(sandbox.RandomHex(6))
	value := "sentinel-" + sandbox.RandomHex(8)
	t.Setenv(name, value)
	sb := s.create(t, drv, func(sp *sandbox.Spec) {
		if sp.Env == nil {
			sp.Env = map[string]string{}
		}
		sp.Env["SPEC_VAR"] = "from-spec"
	})
	env := s.mustSucceed(t, sb, "env")
	if strings.Contains(env, name) || strings.Contains(env, value) {
		t.Fatalf("the parent's %s reached the sandbox:\n%s", name, env)
	}
	if !strings.Contains(env, "SPEC_VAR=from-spec\n") {
		t.Errorf("the spec's env did not reach the sandbox:\n%s", env)
	}
	if strings.Contains(env, "GOROOT=") || strings.Contains(env, "GOPATH=") {
		t.Errorf("the test process's Go environment reached the sandbox:\n%s", env)
	}
}

// tcpProbe tries to open a TCP connection to addr from inside, for at
// most 10 s (a filter that drops packets leaves a connect waiting).
func tcpProbe(addr *net.TCPAddr) string {
	return fmt.Sprintf(`timeout 10 bash -c 'exec 3<>/dev/tcp/%s/%d' 2>/dev/null && echo connected || echo refused`, addr.IP, addr.Port)
}

// probeTarget is the listener the no-network test probes, counting the
// connections it accepts.
func (s *suite) probeTarget(t *testing.T) (*net.TCPAddr, *atomic.Int32) {
	var ln net.Listener
	if s.opts.ProbeTarget != nil {
		ln = s.opts.ProbeTarget(t)
	} else {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr), &accepted
}

func (s *suite) testNoNetwork(t *testing.T, drv driver.Driver) {
	addr, accepted := s.probeTarget(t)
	if s.opts.OpenNetworkReachesTarget {
		// The positive control first: the probe can see a connection.
		open := s.create(t, drv, func(sp *sandbox.Spec) { sp.Network = sandbox.NetworkPolicy{Open: true} })
		if got := s.mustSucceed(t, open, tcpProbe(addr)); got != "connected\n" {
			t.Fatalf("positive control: an open-network sandbox could not reach %s (%q); the probe would prove nothing", addr, got)
		}
		if accepted.Load() == 0 {
			t.Fatalf("positive control: the probe said connected but %s accepted nothing", addr)
		}
	}
	before := accepted.Load()
	sb := s.create(t, drv, func(sp *sandbox.Spec) { sp.Network = sandbox.NetworkPolicy{} }) // the zero value: blocked
	if got := s.mustSucceed(t, sb, tcpProbe(addr)); got != "refused\n" || accepted.Load() != before {
		t.Errorf("a default sandbox connected to %s (%q, %d connections accepted)", addr, got, accepted.Load()-before)
	}
	o := s.exec(t, sb, "getent hosts example.com", sandbox.ExecOptions{})
	if o.res.ExitCode == 0 {
		t.Errorf("a default sandbox resolved example.com: %q", o.stdout)
	}
}

// patterned returns n deterministic pseudo-random bytes.
func patterned(seed uint64, n int64) io.Reader {
	var key [32]byte
	key[0] = byte(seed)
	return io.LimitReader(rand.NewChaCha8(key), n)
}

func (s *suite) roundTrip(t *testing.T, sb *sandbox.Sandbox, p string, content []byte, mode fs.FileMode) {
	t.Helper()
	ctx := s.ctx(t)
	if err := sb.WriteFile(ctx, p, bytes.NewReader(content), mode); err != nil {
		t.Fatalf("write %s: %v", p, err)
	}
	rc, size, err := sb.OpenFile(ctx, p, int64(len(content)))
	if err != nil {
		t.Fatalf("open %s: %v", p, err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	if size != int64(len(content)) || !bytes.Equal(got, content) {
		t.Fatalf("%s: wrote %d bytes, open said %d and read back %d differing bytes", p, len(content), size, len(got))
	}
	// The sandbox itself sees the same bytes.
	sum := sha256.Sum256(content)
	out := s.mustSucceed(t, sb, "sha256sum "+shellQuote(p)+" | cut -d' ' -f1")
	if strings.TrimSpace(out) != hex.EncodeToString(sum[:]) {
		t.Fatalf("%s: the sandbox sees sha256 %s, want %x", p, strings.TrimSpace(out), sum)
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func (s *suite) testFilesRoundTrip(t *testing.T, drv driver.Driver) {
	sb := s.create(t, drv, nil)
	ctx := s.ctx(t)
	var all []byte
	for i := range 4 * 256 {
		all = append(all, byte(i))
	}
	s.roundTrip(t, sb, "bin/all-bytes.bin", all, 0o644)
	s.roundTrip(t, sb, "empty", nil, 0o644)
	few, _ := io.ReadAll(patterned(1, 3<<20+7))
	s.roundTrip(t, sb, "deep/er/path/few-mib.bin", few, 0o600)
	s.roundTrip(t, sb, "/tmp/in-tmp.bin", all[:300], 0o644)
	// Overwriting replaces the whole file.
	s.roundTrip(t, sb, "deep/er/path/few-mib.bin", []byte("short"), 0o644)
	// Modes apply, whatever the umask.
	if err := sb.WriteFile(ctx, "run.sh", strings.NewReader("#!/bin/sh\necho ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := s.mustSucceed(t, sb, "./run.sh"); got != "ran\n" {
		t.Errorf("a file written with mode 0755 did not run: %q", got)
	}
	if fi, err := sb.Stat(ctx, "run.sh"); err != nil || fi.Mode.Perm() != 0o755 {
		t.Errorf("stat run.sh: mode %v, err %v; want 0755", fi.Mode, err)
	}
	// Files the command writes come back out.
	s.mustSucceed(t, sb, "printf 'made\\000inside' > made.bin")
	rc, _, err := sb.OpenFile(ctx, "made.bin", 100)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "made\x00inside" {
		t.Errorf("made.bin = %q", got)
	}
}

func (s *suite) testBigFile(t *testing.T, drv driver.Driver) {
	n := s.opts.BigFileSize
	if n < 0 {
		t.Skip("BigFileSize < 0: the backend opted out of the big-file test")
	}
	sb := s.create(t, drv, nil)
	ctx := s.ctx(t)
	watch := memwatch.Start()

	want := sha256.New()
	if err := sb.WriteFile(ctx, "big.bin", io.TeeReader(patterned(2, n), want), 0o644); err != nil {
		watch.Stop()
		t.Fatalf("write %d bytes: %v", n, err)
	}
	rc, size, err := sb.OpenFile(ctx, "big.bin", n)
	if err != nil {
		watch.Stop()
		t.Fatalf("open: %v", err)
	}
	got := sha256.New()
	copied, err := io.Copy(got, rc)
	rc.Close()
	peak := watch.Stop()
	if err != nil || copied != n || size != n {
		t.Fatalf("read back %d of %d bytes (open said %d): %v", copied, n, size, err)
	}
	if !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatalf("the %d-byte file came back different", n)
	}
	growth := peak.HeapGrowth()
	t.Logf("streamed %d MiB each way; heap peak %d MiB above the %d MiB baseline", n>>20, growth>>20, peak.BaseHeapInuse>>20)
	if growth > s.opts.MaxHeapGrowth {
		t.Errorf("heap grew by %d MiB while streaming a %d MiB file; the limit is %d MiB (is the file buffered whole?)", growth>>20, n>>20, s.opts.MaxHeapGrowth>>20)
	}
}

// bounded runs fn and fails the test if it has not returned near the test
// binary's deadline: a read of an endless file must not hang.
func (s *suite) bounded(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	deadline.Wait(t, what+" to return", done)
}

func (s *suite) testTypedErrors(t *testing.T, drv driver.Driver) {
	sb := s.create(t, drv, nil)
	ctx := s.ctx(t)
	s.mustSucceed(t, sb, "mkdir -p adir && mkfifo afifo")
	check := func(p string, want ...error) {
		t.Helper()
		var err error
		s.bounded(t, "OpenFile("+p+")", func() {
			var rc io.ReadCloser
			rc, _, err = sb.OpenFile(ctx, p, 1<<20)
			if err == nil {
				// Allowed for endless files: the reader must then stop at the limit.
				_, err = io.Copy(io.Discard, rc)
				rc.Close()
				if err == nil {
					err = errors.New("read to EOF without an error")
				}
			}
		})
		for _, w := range want {
			if errors.Is(err, w) {
				return
			}
		}
		t.Errorf("OpenFile(%s): want one of %v, got %v", p, want, err)
	}
	check("adir", sandbox.ErrIsDir)
	check("missing.txt", sandbox.ErrNotFound)
	check("adir/missing/deeper.txt", sandbox.ErrNotFound)
	check("/dev/zero", sandbox.ErrNotRegular, sandbox.ErrTooLarge)
	check("afifo", sandbox.ErrNotRegular)

	// Over the limit: a typed error that carries the sizes.
	if err := sb.WriteFile(ctx, "ten.txt", strings.NewReader("0123456789"), 0); err != nil {
		t.Fatal(err)
	}
	_, _, err := sb.OpenFile(ctx, "ten.txt", 5)
	var tl *sandbox.TooLargeError
	if !errors.As(err, &tl) || !errors.Is(err, sandbox.ErrTooLarge) || tl.MaxBytes != 5 || (tl.Size != 10 && tl.Size != -1) {
		t.Errorf("OpenFile over the limit: want a TooLargeError (size 10, max 5), got %v", err)
	}
	if _, err := sb.Stat(ctx, "missing.txt"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Stat(missing): want ErrNotFound, got %v", err)
	}
	if _, err := sb.List(ctx, "missing-dir"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("List(missing): want ErrNotFound, got %v", err)
	}
}

func (s *suite) testListAndStat(t *testing.T, drv driver.Driver) {
	sb := s.create(t, drv, nil)
	ctx := s.ctx(t)
	s.mustSucceed(t, sb, "mkdir -p d/sub/inner && printf abc > d/b.txt && printf 12345 > d/a.txt && : > d/.hidden")
	list, err := sb.List(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range list {
		names = append(names, e.Name)
	}
	if want := []string{".hidden", "a.txt", "b.txt", "sub"}; !slices.Equal(names, want) {
		t.Fatalf("list d = %v, want %v (sorted, not recursive)", names, want)
	}
	byName := map[string]sandbox.FileInfo{}
	for _, e := range list {
		byName[e.Name] = e
	}
	if !byName["sub"].IsDir() || byName["a.txt"].IsDir() || !byName["a.txt"].IsRegular() {
		t.Errorf("list marks: sub %v, a.txt %v", byName["sub"].Mode, byName["a.txt"].Mode)
	}
	if byName["a.txt"].Size != 5 || byName["b.txt"].Size != 3 {
		t.Errorf("list sizes: a.txt %d, b.txt %d", byName["a.txt"].Size, byName["b.txt"].Size)
	}
	fi, err := sb.Stat(ctx, "d/a.txt")
	if err != nil || fi.Size != 5 || !fi.IsRegular() || fi.Name != "a.txt" {
		t.Errorf("stat d/a.txt = %+v, %v", fi, err)
	}
	fi, err = sb.Stat(ctx, "d/sub")
	if err != nil || !fi.IsDir() {
		t.Errorf("stat d/sub = %+v, %v", fi, err)
	}
	if list, err := sb.List(ctx, "d/sub/inner"); err != nil || len(list) != 0 {
		t.Errorf("list of an empty dir = %v, %v", list, err)
	}
}

func (s *suite) testDestroy(t *testing.T, drv driver.Driver) {
	spec := s.opts.Spec
	sb, err := sandbox.NewBackend(drv).Create(s.ctx(t), spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx := s.ctx(t)
	if err := sb.WriteFile(ctx, "f", strings.NewReader("x"), 0); err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatalf("second destroy: %v", err)
	}
	if err := drv.Destroy(ctx, sb.ID()); err != nil && !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("driver destroy of a destroyed sandbox: %v", err)
	}
	gone := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, sandbox.ErrGone) {
			t.Errorf("%s after destroy: want ErrGone, got %v", what, err)
		} else if sandbox.IsRetryable(err) {
			t.Errorf("%s after destroy: ErrGone must be terminal", what)
		}
	}
	_, err = sb.Exec(ctx, "true", sandbox.ExecOptions{Timeout: time.Minute})
	gone("exec", err)
	_, _, err = sb.OpenFile(ctx, "f", 10)
	gone("open", err)
	gone("write", sb.WriteFile(ctx, "g", strings.NewReader("x"), 0))
	_, err = sb.Stat(ctx, "f")
	gone("stat", err)
	_, err = sb.List(ctx, ".")
	gone("list", err)
	_, err = sandbox.NewBackend(drv).Open(sb.ID()).Info(ctx)
	gone("info", err)
}

func (s *suite) testIsolation(t *testing.T, drv driver.Driver) {
	a := s.create(t, drv, nil)
	b := s.create(t, drv, nil)
	ctx := s.ctx(t)
	secret := "secret-" + sandbox.RandomHex(8)
	file := secret + ".txt"
	if err := b.WriteFile(ctx, file, strings.NewReader(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	info, err := b.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{info.Workdir + "/" + file}
	if s.opts.HostWorkdir != nil {
		if hw := s.opts.HostWorkdir(b.ID()); hw != "" {
			paths = append(paths, hw+"/"+file)
		}
	}
	for _, p := range paths {
		o := s.exec(t, a, "cat "+shellQuote(p), sandbox.ExecOptions{})
		if strings.Contains(o.stdout, secret) {
			t.Errorf("sandbox A read B's file through %s", p)
		}
		if rc, _, err := a.OpenFile(ctx, p, 1<<20); err == nil {
			got, _ := io.ReadAll(rc)
			rc.Close()
			if strings.Contains(string(got), secret) {
				t.Errorf("OpenFile on A read B's file through %s", p)
			}
		}
	}
	// Nowhere in A's filesystem is there a file of that name.
	o := s.exec(t, a, "find / -name "+file+" 2>/dev/null; true", sandbox.ExecOptions{})
	if strings.Contains(o.stdout, file) {
		t.Errorf("sandbox A can see B's file at %q", strings.TrimSpace(o.stdout))
	}
}

func (s *suite) testRefused(t *testing.T, drv driver.Driver) {
	if s.opts.RefusedSpec == nil {
		t.Skip("Options.RefusedSpec not set: this backend named no spec it must refuse")
	}
	ctx := s.ctx(t)
	before, err := s.opts.CountProvisioned(ctx, drv)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.NewBackend(drv).Create(ctx, *s.opts.RefusedSpec)
	if err == nil {
		sb.Destroy(ctx)
		t.Fatal("the backend accepted a spec it must refuse")
	}
	if !errors.Is(err, sandbox.ErrRefused) || !sandbox.IsFinal(err) {
		t.Errorf("want a terminal ErrRefused, got %v", err)
	}
	after, err := s.opts.CountProvisioned(ctx, drv)
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("a refused create provisioned something: %d sandboxes before, %d after", before, after)
	}
}

func (s *suite) testTags(t *testing.T, drv driver.Driver) {
	ctx := s.ctx(t)
	if !drv.Capabilities().Tags {
		sb := s.create(t, drv, nil)
		if _, err := sb.Tags(ctx); !errors.Is(err, sandbox.ErrUnsupported) {
			t.Errorf("a backend without tags must return ErrUnsupported, got %v", err)
		}
		return
	}
	owner := sandbox.OwnerFor("conformance_dag", "run_"+sandbox.RandomHex(4))
	sb := s.create(t, drv, func(sp *sandbox.Spec) {
		sp.Owner = owner
		sp.Lifetime = 20 * time.Minute
		sp.Tags = map[string]string{"team": "data", sandbox.TagOwner: "spoofed", sandbox.TagHolder: "spoofed"}
	})
	tags, err := sb.Tags(ctx)
	if err != nil {
		t.Fatal(err)
	}
	info, err := sb.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tags[sandbox.TagOwner] != owner || tags["team"] != "data" || tags[sandbox.TagSandbox] != info.Name {
		t.Errorf("tags after create: %v", tags)
	}
	if _, held := tags[sandbox.TagHolder]; held {
		t.Errorf("a new sandbox is held: %v", tags)
	}
	if exp := sandbox.ExpiresAt(tags); exp.Before(time.Now().Add(19*time.Minute)) || exp.After(time.Now().Add(21*time.Minute)) {
		t.Errorf("airflow_expires_at %q is not about 20 minutes from now", tags[sandbox.TagExpiresAt])
	}
	if got, want := tags[sandbox.TagNetwork], `{"allow_egress_to":[],"allow_egress_to_cidrs":[],"block_network":true}`; got != want {
		t.Errorf("airflow_network = %s, want %s", got, want)
	}
	tags["extra"] = "value-2"
	if err := sb.SetTags(ctx, tags); err != nil {
		t.Fatal(err)
	}
	again, err := sandbox.NewBackend(drv).Open(sb.ID()).Tags(ctx)
	if err != nil || !maps.Equal(again, tags) {
		t.Errorf("tags did not round-trip: set %v, got %v (%v)", tags, again, err)
	}
	list, err := sandbox.NewBackend(drv).List(ctx, map[string]string{sandbox.TagOwner: owner})
	if err != nil || len(list) != 1 || list[0].ID != sb.ID() {
		t.Errorf("ListSandboxes by owner = %v, %v; want just %s", list, err, sb.ID())
	}
	if list, err := sandbox.NewBackend(drv).List(ctx, map[string]string{sandbox.TagOwner: owner, "team": "other"}); err != nil || len(list) != 0 {
		t.Errorf("ListSandboxes must match every pair: got %v, %v", list, err)
	}
}

func (s *suite) testAttach(t *testing.T, drv driver.Driver) {
	if !drv.Capabilities().Tags {
		t.Skip("attach needs tags, which this backend does not support")
	}
	ctx := s.ctx(t)
	owner := sandbox.OwnerFor("conformance_dag", "run_"+sandbox.RandomHex(4))
	sb := s.create(t, drv, func(sp *sandbox.Spec) { sp.Owner = owner; sp.Workdir = "/workspace" })
	h1 := sandbox.HolderFor("conformance_dag", "run", "agent", -1)
	h2 := sandbox.HolderFor("conformance_dag", "run", "agent", 1)

	if _, _, err := sandbox.NewBackend(drv).Attach(ctx, sb.ID(), "other_dag/run", h1); err == nil {
		t.Error("attach with the wrong owner succeeded")
	}
	got, att, err := sandbox.NewBackend(drv).Attach(ctx, sb.ID(), owner, h1)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	if got.ID() != sb.ID() || att.Holder != h1 || att.Workdir != "/workspace" || att.Network == nil || att.Network.Open || att.ExpiresAt.IsZero() {
		t.Errorf("attachment = %+v", att)
	}
	if _, _, err := sandbox.NewBackend(drv).Attach(ctx, sb.ID(), owner, h1); err != nil {
		t.Errorf("re-attach by the same holder: %v", err)
	}
	if _, _, err := sandbox.NewBackend(drv).Attach(ctx, sb.ID(), owner, h2); err == nil {
		t.Error("a second holder attached while the first held the sandbox")
	}
	if err := sandbox.NewBackend(drv).Release(ctx, sb.ID(), h2); err != nil {
		t.Errorf("release by a non-holder: %v", err)
	}
	if tags, _ := sb.Tags(ctx); tags[sandbox.TagHolder] != h1 {
		t.Errorf("release by a non-holder dropped the claim: %v", tags)
	}
	if err := sandbox.NewBackend(drv).Release(ctx, sb.ID(), h1); err != nil {
		t.Fatalf("release: %v", err)
	}
	if tags, _ := sb.Tags(ctx); tags[sandbox.TagHolder] != "" {
		t.Errorf("holder still set after release: %v", tags)
	}
	if _, _, err := sandbox.NewBackend(drv).Attach(ctx, sb.ID(), owner, h2); err != nil {
		t.Errorf("attach after release: %v", err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sandbox.NewBackend(drv).Release(ctx, sb.ID(), h2); err != nil {
		t.Errorf("release of a destroyed sandbox: %v", err)
	}
}

// testCapabilities checks that the declared capabilities are the truth: the
// optional interfaces are implemented exactly when declared, and every spec
// field the backend declares it cannot honour is refused, terminally and
// before anything is provisioned.
func (s *suite) testCapabilities(t *testing.T, drv driver.Driver) {
	caps := drv.Capabilities()
	_, tagger := drv.(driver.Tagger)
	_, lister := drv.(driver.Lister)
	_, renewer := drv.(driver.Renewer)
	for _, c := range []struct {
		name           string
		declared, real bool
	}{{"Tags (Tagger)", caps.Tags, tagger}, {"List (Lister)", caps.List, lister}, {"Renew (Renewer)", caps.Renew, renewer}} {
		if c.declared != c.real {
			t.Errorf("capability %s is declared %v but the driver implements it: %v", c.name, c.declared, c.real)
		}
	}
	if s.opts.SupportsTags && !caps.Tags {
		t.Errorf("the driver test expects tags but Capabilities().Tags is false")
	}
	if !caps.BlockNetwork {
		t.Errorf("every backend must offer a blocked network: it is the default spec")
	}
	ctx := s.ctx(t)
	probes := []struct {
		field string
		edit  func(*sandbox.Spec)
	}{
		{"cpu", func(sp *sandbox.Spec) { sp.CPU = 1 }},
		{"memory_mib", func(sp *sandbox.Spec) { sp.MemoryMiB = 512 }},
		{"gpu", func(sp *sandbox.Spec) { sp.GPU = "A10G" }},
		{"network.block", func(sp *sandbox.Spec) { sp.Network = sandbox.NetworkPolicy{Open: true} }},
		{"network.allow_hosts", func(sp *sandbox.Spec) {
			sp.Network = sandbox.NetworkPolicy{AllowHosts: []string{"pypi.org"}}
		}},
		{"network.allow_cidrs", func(sp *sandbox.Spec) {
			sp.Network = sandbox.NetworkPolicy{AllowCIDRs: []string{"192.0.2.0/24"}}
		}},
	}
	for _, p := range probes {
		spec := s.opts.Spec
		p.edit(&spec)
		refusals := caps.Refusals(spec.WithDefaults())
		if len(refusals) == 0 {
			continue // declared possible; other tests exercise what they can
		}
		before, err := s.opts.CountProvisioned(ctx, drv)
		if err != nil {
			t.Fatal(err)
		}
		sb, err := sandbox.NewBackend(drv).Create(ctx, spec)
		if err == nil {
			sb.Destroy(ctx)
			t.Errorf("%s: declared unsupported, yet a sandbox was created", p.field)
			continue
		}
		if !errors.Is(err, sandbox.ErrRefused) || !sandbox.IsFinal(err) || !strings.Contains(err.Error(), p.field) || !strings.Contains(err.Error(), drv.Backend()) {
			t.Errorf("%s: want a terminal ErrRefused naming the field and the %s backend, got %v", p.field, drv.Backend(), err)
		}
		if after, err := s.opts.CountProvisioned(ctx, drv); err != nil || after != before {
			t.Errorf("%s: a refused create provisioned something (%d before, %d after, %v)", p.field, before, after, err)
		}
	}
}
