package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/schema"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/selftest"
	"github.com/airflow-sandbox/airflow-go-worker/testing/makebuild"
	"github.com/airflow-sandbox/airflow-go-worker/testing/syncbuf"
)

var bundleBin string

// TestMain builds the test bundle once; with SUPERVISOR_TEST_HELPER set the
// test binary instead acts as a hand-written bundle (see helperMain).
func TestMain(m *testing.M) {
	if mode := os.Getenv("SUPERVISOR_TEST_HELPER"); mode != "" {
		os.Exit(helperMain(mode, os.Args[1:]))
	}
	dir, err := os.MkdirTemp("", "supervisor-test-")
	if err != nil {
		panic(err)
	}
	bundleBin = filepath.Join(dir, "testbundle")
	// Built as make build builds: its fork-to-terminal benchmark measures
	// a static binary, as Airflow starts one.
	if err := (makebuild.Build{Pkg: "./internal/testbundle"}).To(bundleBin); err != nil {
		fmt.Fprintln(os.Stderr, "building the test bundle:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// helperMain is a bundle that reports success and then exits non-zero, to
// check that a reported state only counts with exit 0; in mode
// succeed-leave-output-open it exits 0 instead, leaving a process behind
// (mode hold-output) that keeps its stdout and stderr open until the FIFO
// in SUPERVISOR_TEST_FIFO has no writer left.
func helperMain(mode string, args []string) int {
	if mode == "hold-output" {
		f, err := os.Open(os.Getenv("SUPERVISOR_TEST_FIFO"))
		if err != nil {
			return 7
		}
		io.Copy(io.Discard, f)
		return 0
	}
	var comm string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--comm="); ok {
			comm = v
		}
		if v, ok := strings.CutPrefix(a, "--logs="); ok {
			if c, err := net.Dial("tcp", v); err == nil {
				defer c.Close()
			}
		}
	}
	c, err := net.Dial("tcp", comm)
	if err != nil {
		return 9
	}
	defer c.Close()
	if _, err := protocol.ReadFrame(c); err != nil {
		return 8
	}
	if mode == "ignore-sigterm" {
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ignoring SIGTERM")
		select {}
	}
	p, _ := protocol.EncodeRequest(0, &protocol.SucceedTask{EndDate: time.Now(), TaskOutlets: []protocol.AssetProfile{}, OutletEvents: []protocol.OutletEvent{}})
	protocol.WriteFrame(c, p)
	if mode == "succeed-leave-output-open" {
		self, _ := os.Executable()
		holder := exec.Command(self)
		holder.Env = append(os.Environ(), "SUPERVISOR_TEST_HELPER=hold-output")
		holder.Stdout, holder.Stderr = os.Stdout, os.Stderr
		if err := holder.Start(); err != nil {
			return 6
		}
		return 0
	}
	return 3
}

func newSup(t *testing.T, env ...string) (*Supervisor, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	return &Supervisor{
		Executable: bundleBin,
		Env:        append([]string{"PATH=" + os.Getenv("PATH")}, env...),
		StateDir:   t.TempDir(),
		Logs:       logs,
		KillGrace:  5 * time.Second,
	}, logs
}

// run runs one task, for as long as it takes: on a loaded host a reply
// came just after a fixed 30 s limit. go test's -timeout is the bound.
func run(t *testing.T, s *Supervisor, req TaskRequest) Result {
	t.Helper()
	res, err := s.RunTask(deadline.Context(t), req)
	if err != nil {
		t.Fatalf("RunTask: %v", err)
	}
	return res
}

// A task process starts on one P and gets the runtime's default once the
// task has run a little; GOMAXPROCS in its environment pins it instead.
func TestTaskStartsOnOnePUnlessPinned(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Fatal("this test needs 2 or more CPUs, as CI has")
	}
	procs := func(env ...string) map[string]any {
		t.Helper()
		s, logs := newSup(t, env...)
		res := run(t, s, TaskRequest{DagID: "e2e", TaskID: "procs", RunID: "p"})
		if res.State != StateSuccess {
			t.Fatalf("state %s\n%s", res.State, logs)
		}
		v, ok, err := s.GetXCom("e2e", "p", "procs", "return_value")
		if err != nil || !ok {
			t.Fatalf("return_value not stored: %v %v", ok, err)
		}
		return v.(map[string]any)
	}
	got := procs()
	if got["at_start"] != float64(1) || got["later"].(float64) < 2 {
		t.Errorf("without GOMAXPROCS: %v, want 1 at the start and the default (2 or more) later", got)
	}
	if got := procs("GOMAXPROCS=3"); got["at_start"] != float64(3) || got["later"] != float64(3) {
		t.Errorf("with GOMAXPROCS=3: %v, want 3 throughout", got)
	}
}

func TestPingSucceedsAndPushesXCom(t *testing.T) {
	s, logs := newSup(t)
	res := run(t, s, TaskRequest{DagID: selftest.DagID, TaskID: "ping", RunID: "r1"})
	if res.State != StateSuccess || res.ExitCode != 0 {
		t.Fatalf("state %s exit %d\n%s", res.State, res.ExitCode, logs)
	}
	if !slices.Equal(res.Requests, []string{"SetXCom", "SucceedTask"}) {
		t.Fatalf("requests %v", res.Requests)
	}
	v, ok, err := s.GetXCom(selftest.DagID, "r1", "ping", "return_value")
	if err != nil || !ok {
		t.Fatalf("return_value not stored: %v %v", ok, err)
	}
	if gv, _ := v.(map[string]any)["go_version"].(string); !strings.HasPrefix(gv, "go") {
		t.Fatalf("ping result %v", v)
	}
	if !strings.Contains(logs.String(), "pong") {
		t.Fatalf("task logs not shown:\n%s", logs)
	}
}

func TestFailureRetryRemovedPanic(t *testing.T) {
	s, _ := newSup(t)
	for _, tc := range []struct {
		dag, task   string
		retry       bool
		want        string
		reasonMatch string
	}{
		{selftest.DagID, "fail", false, StateFailed, ""},
		{selftest.DagID, "fail", true, StateUpForRetry, "deliberate failure"},
		{selftest.DagID, "no_such_task", true, StateRemoved, ""},
		{"e2e", "panic", true, StateUpForRetry, "panic: deliberate panic"},
		{"e2e", "panic", false, StateFailed, ""},
	} {
		res := run(t, s, TaskRequest{DagID: tc.dag, TaskID: tc.task, ShouldRetry: tc.retry, MaxTries: 2})
		if res.State != tc.want || res.ExitCode != 0 {
			t.Errorf("%s.%s retry=%v: state %s exit %d, want %s", tc.dag, tc.task, tc.retry, res.State, res.ExitCode, tc.want)
		}
		if !strings.Contains(res.RetryReason, tc.reasonMatch) {
			t.Errorf("%s.%s: retry reason %q should contain %q", tc.dag, tc.task, res.RetryReason, tc.reasonMatch)
		}
		if slices.Contains(res.Requests, "SetXCom") {
			t.Errorf("%s.%s: a failed task must not push XCom", tc.dag, tc.task)
		}
	}
}

func TestPanicStackIsLogged(t *testing.T) {
	s, _ := newSup(t)
	res := run(t, s, TaskRequest{DagID: "e2e", TaskID: "panic"})
	for _, l := range res.LogLines {
		if l["event"] == "task panicked" && strings.Contains(fmt.Sprint(l["stack"]), "main.main") {
			return
		}
	}
	t.Fatalf("no panic record with a stack in %v", res.LogLines)
}

func TestSIGTERMMidTaskStillReportsOutcome(t *testing.T) {
	started := make(chan struct{})
	var once sync.Once
	s, logs := newSup(t)
	logs.OnWrite = func(p string) {
		if strings.Contains(p, "sleeping") {
			once.Do(func() { close(started) })
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-started
		cancel()
	}()
	res, err := s.RunTask(ctx, TaskRequest{DagID: selftest.DagID, TaskID: "sleep", Conf: map[string]any{"seconds": 3600}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Terminal == nil || res.Terminal["state"] != "failed" || res.ExitCode != 0 {
		t.Fatalf("want a TaskState failed and exit 0 after SIGTERM, got %+v exit %d\n%s", res.Terminal, res.ExitCode, logs)
	}
	if res.State != StateFailed {
		t.Fatalf("state %s", res.State)
	}
	var sawSignal, sawReason bool
	for _, l := range res.LogLines {
		sawSignal = sawSignal || (l["event"] == "received a signal; cancelling the task" && l["signal"] == "terminated")
		sawReason = sawReason || strings.Contains(fmt.Sprint(l["error"]), "sleep cancelled")
	}
	if !sawSignal || !sawReason {
		t.Fatalf("the signal and the task's own error should be logged: %v", res.LogLines)
	}
	// A task that slept on through SIGTERM would have been killed after
	// the grace (no terminal frame, above) or outlast go test's -timeout.
}

func TestConnectionNotFound(t *testing.T) {
	s, logs := newSup(t)
	res := run(t, s, TaskRequest{DagID: selftest.DagID, TaskID: "connection", Conf: map[string]any{"conn_id": "nope"}})
	if res.State != StateFailed || !slices.Contains(res.Requests, "GetConnection") {
		t.Fatalf("state %s requests %v", res.State, res.Requests)
	}
	if !strings.Contains(logs.String(), `connection \"nope\": connection not found`) {
		t.Fatalf("the failure should name the connection:\n%s", logs)
	}
}

func TestConnectionFromEnvIsMaskedInLogs(t *testing.T) {
	s, logs := newSup(t, `AIRFLOW_CONN_MY_HTTP={"conn_type": "http", "host": "example.internal", "port": 8443, "login": "bob", "password": "pa55word-xyz"}`)
	s.Airflow, s.SchemaVersion = "3.4", schema.V34 // the stub call passes conn_id
	res := run(t, s, TaskRequest{DagID: selftest.DagID, TaskID: "connection", ArgBindings: []protocol.ArgBinding{{Name: "conn_id", Kind: "literal", Value: "my_http"}}, RunID: "r"})
	if res.State != StateSuccess {
		t.Fatalf("state %s\n%s", res.State, logs)
	}
	v, _, _ := s.GetXCom(selftest.DagID, "r", "connection", "return_value")
	m := v.(map[string]any)
	if m["host"] != "example.internal" || m["port"] != float64(8443) || m["login"] != "bob" {
		t.Fatalf("result %v", m)
	}
	if strings.Contains(fmt.Sprint(v), "pa55word") || strings.Contains(logs.String(), "pa55word") {
		t.Fatal("the password leaked")
	}
	if !slices.Contains(res.Requests, "MaskSecret") {
		t.Fatalf("the password must be masked: %v", res.Requests)
	}
}

func TestSecretsRedactedFromShownLogsAndOutput(t *testing.T) {
	s, logs := newSup(t)
	res := run(t, s, TaskRequest{DagID: "e2e", TaskID: "leak"})
	if res.State != StateSuccess {
		t.Fatalf("state %s", res.State)
	}
	out := logs.String()
	if strings.Contains(out, "s3cr3t-value") || strings.Contains(fmt.Sprint(res.LogLines, res.Output), "s3cr3t-value") {
		t.Fatalf("secret leaked:\n%s", out)
	}
	if !strings.Contains(out, "about to print ***") || !strings.Contains(out, "stdout has *** too") {
		t.Fatalf("expected redacted lines:\n%s", out)
	}
	// As rendered too (issue 19, hole 4): what was printed with a byte
	// inside it that no terminal shows.
	shown := strings.NewReplacer("\x1b[0m", "", "\x00", "", "\r", "").Replace(out + fmt.Sprint(res.LogLines, res.Output))
	if strings.Contains(shown, "s3cr3t-value") {
		t.Fatalf("the secret shows once rendered:\n%q", out)
	}
	for _, want := range []string{"reset inside ***", "NUL inside ***", "CR inside ***"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in what the supervisor shows:\n%s", want, out)
		}
	}
}

func TestXComRoundTripAndBindingAcrossTasks(t *testing.T) {
	s, logs := newSup(t)
	s.Airflow, s.SchemaVersion = "3.4", schema.V34 // arg_bindings are a 3.4 feature
	res := run(t, s, TaskRequest{DagID: selftest.DagID, TaskID: "xcom_roundtrip", RunID: "r2"})
	if res.State != StateSuccess {
		t.Fatalf("state %s\n%s", res.State, logs)
	}
	v, ok, _ := s.GetXCom(selftest.DagID, "r2", "xcom_roundtrip", "return_value")
	if !ok || v.(map[string]any)["hello"] != "airflow" {
		t.Fatalf("round trip value %v", v)
	}
	if err := s.PutXCom("e2e", "r2", "up", "return_value", "from upstream"); err != nil {
		t.Fatal(err)
	}
	res = run(t, s, TaskRequest{DagID: "e2e", TaskID: "echo", RunID: "r2", Conf: map[string]any{"times": 4},
		ArgBindings: []protocol.ArgBinding{{Name: "msg", Kind: "xcom", TaskID: "up"}}})
	if res.State != StateSuccess {
		t.Fatalf("echo: %s\n%s", res.State, logs)
	}
	v, _, _ = s.GetXCom("e2e", "r2", "echo", "return_value")
	if m := v.(map[string]any); m["msg"] != "from upstream" || m["times"] != float64(4) {
		t.Fatalf("echo result %v", v)
	}
}

func TestLogFiltering(t *testing.T) {
	s, _ := newSup(t, "AIRFLOW__LOGGING__LOGGING_LEVEL=ERROR")
	res := run(t, s, TaskRequest{DagID: selftest.DagID, TaskID: "fail"})
	var events []string
	for _, l := range res.LogLines {
		events = append(events, fmt.Sprint(l["level"], ":", l["event"]))
		if l["level"] != "error" && l["level"] != "critical" {
			t.Errorf("record below ERROR got through: %v", l)
		}
	}
	if !slices.Contains(events, "error:task failed") {
		t.Fatalf("the failure must still be logged: %v", events)
	}
	s, _ = newSup(t, "AIRFLOW__LOGGING__NAMESPACE_LEVELS=task=DEBUG")
	res = run(t, s, TaskRequest{DagID: selftest.DagID, TaskID: "ping"})
	found := false
	for _, l := range res.LogLines {
		found = found || l["event"] == "pong"
	}
	if !found {
		t.Fatalf("info lines should pass: %v", res.LogLines)
	}
}

func TestNonZeroExitOverridesReportedState(t *testing.T) {
	self, _ := os.Executable()
	for _, retry := range []bool{false, true} {
		s := &Supervisor{Executable: self, Env: append(os.Environ(), "SUPERVISOR_TEST_HELPER=succeed-then-exit3")}
		res, err := s.RunTask(context.Background(), TaskRequest{DagID: "d", TaskID: "t", ShouldRetry: retry})
		if err != nil {
			t.Fatal(err)
		}
		want := StateFailed
		if retry {
			want = StateUpForRetry
		}
		if res.ExitCode != 3 || res.State != want || res.Terminal == nil {
			t.Fatalf("retry=%v: exit %d state %s terminal %v", retry, res.ExitCode, res.State, res.Terminal)
		}
	}
}

// A task process that exited 0 succeeded, even when something it left
// behind keeps its output pipes open past the supervisor's WaitDelay (and
// Wait returns exec.ErrWaitDelay): the exit code is the process's own.
func TestSuccessStandsWhenALeftoverHoldsTheOutput(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "release")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// The test is the FIFO's only writer: the leftover process reads it
	// until the test closes it, at the end.
	w, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	self, _ := os.Executable()
	s := &Supervisor{Executable: self, Env: append(os.Environ(), "SUPERVISOR_TEST_HELPER=succeed-leave-output-open", "SUPERVISOR_TEST_FIFO="+fifo)}
	res := run(t, s, TaskRequest{DagID: "d", TaskID: "t"})
	if res.ExitCode != 0 || res.State != StateSuccess || res.Terminal == nil {
		t.Fatalf("exit %d state %s terminal %v; output %q", res.ExitCode, res.State, res.Terminal, res.Output)
	}
}

func TestStartupFailures(t *testing.T) {
	s := &Supervisor{Executable: "/bin/false"}
	res, err := s.RunTask(context.Background(), TaskRequest{DagID: "d", TaskID: "t", ShouldRetry: true})
	if err == nil || !strings.Contains(err.Error(), "exited with 1 before connecting") || res.State != StateUpForRetry {
		t.Fatalf("exit before connect: %v %+v", err, res)
	}
	s = &Supervisor{Executable: "/bin/sh", Args: []string{"-c", "exec sleep 30", "sh"}, StartupTimeout: 200 * time.Millisecond}
	res, err = s.RunTask(context.Background(), TaskRequest{DagID: "d", TaskID: "t"})
	if err == nil || !strings.Contains(err.Error(), "did not connect within") || res.State != StateFailed {
		t.Fatalf("startup timeout: %v %+v", err, res)
	}
	s = &Supervisor{Executable: filepath.Join(t.TempDir(), "missing")}
	if _, err := s.RunTask(context.Background(), TaskRequest{DagID: "d", TaskID: "t"}); err == nil {
		t.Fatal("a missing executable must be an error")
	}
}

func TestParseTaskHandlers(t *testing.T) {
	s, _ := newSup(t)
	body, err := s.ParseTaskHandlers(context.Background(), "/dags/bundle")
	if err != nil {
		t.Fatal(err)
	}
	if body["fileloc"] != "/dags/bundle" {
		t.Fatalf("fileloc %v", body["fileloc"])
	}
	th := body["task_handlers"].(map[string]any)
	st := th[selftest.DagID].([]any)
	if len(st) != 6 {
		t.Fatalf("selftest declares 6 tasks, got %v", st)
	}
	conn := st[1].(map[string]any)
	params := conn["params"].([]any)
	if conn["task_id"] != "connection" || len(params) != 1 || params[0].(map[string]any)["name"] != "conn_id" {
		t.Fatalf("connection declaration %v", conn)
	}
}

// rawBundle forks the test bundle against hand-driven sockets and returns
// its exit code and stderr once it exits.
func rawBundle(t *testing.T, first []byte) (int, string) {
	t.Helper()
	c := forkRaw(t)
	c.comm.Write(first)
	return c.wait(t, "on bad input"), c.stderr.String()
}

// rawChild is a forked bundle whose comm socket the test drives by hand.
type rawChild struct {
	cmd    *exec.Cmd
	comm   net.Conn
	stderr *bytes.Buffer // read it only after wait
	done   chan error
}

// forkRaw starts the test bundle against two listeners and accepts both of
// its connections; the logs socket is drained and ignored.
func forkRaw(t *testing.T) *rawChild {
	t.Helper()
	commL, _ := net.Listen("tcp", "127.0.0.1:0")
	logsL, _ := net.Listen("tcp", "127.0.0.1:0")
	t.Cleanup(func() { commL.Close(); logsL.Close() })
	c := &rawChild{stderr: &bytes.Buffer{}, done: make(chan error, 1)}
	c.cmd = exec.Command(bundleBin, "--comm="+commL.Addr().String(), "--logs="+logsL.Addr().String())
	c.cmd.Stderr = c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	logs, err := logsL.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logs.Close() })
	go io.Copy(io.Discard, logs)
	if c.comm, err = commL.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.comm.Close() })
	return c
}

// wait returns the bundle's exit code, failing the test if it hangs
// until near the test binary's deadline.
func (c *rawChild) wait(t *testing.T, when string) int {
	t.Helper()
	select {
	case err := <-c.done:
		return exitCode(err)
	case <-deadline.Context(t).Done():
		c.cmd.Process.Kill()
		t.Fatalf("the bundle hung %s", when)
	}
	return 0
}

func TestBundleRejectsBadFrames(t *testing.T) {
	frame := func(payload []byte) []byte {
		var b bytes.Buffer
		protocol.WriteFrame(&b, payload)
		return b.Bytes()
	}
	huge := make([]byte, 4)
	binary.BigEndian.PutUint32(huge, protocol.MaxFrameSize+1)
	unknown, _ := protocol.EncodeReply(0, protocol.Raw{"type": "Surprise"}, nil)
	noTI, _ := protocol.EncodeReply(0, protocol.Raw{"type": "StartupDetails"}, nil)
	for name, tc := range map[string]struct {
		bytes []byte
		want  string
	}{
		"oversized":    {huge, "frame too large"},
		"garbage":      {frame([]byte{0xc1, 0xc1}), "malformed frame"},
		"cut short":    {append([]byte{0, 0, 0, 50}, 1, 2, 3), "reading the first frame"},
		"unknown type": {frame(unknown), `unexpected first message type "Surprise"`},
		"missing ti":   {frame(noTI), "StartupDetails.ti is required"},
	} {
		t.Run(name, func(t *testing.T) {
			first := tc.bytes
			if name == "cut short" {
				// Close our side after the partial frame so the bundle sees EOF.
				code, stderr := rawBundleClose(t, first)
				if code == 0 || !strings.Contains(stderr, tc.want) {
					t.Fatalf("exit %d stderr %q", code, stderr)
				}
				return
			}
			code, stderr := rawBundle(t, first)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want non-zero and %q", code, stderr, tc.want)
			}
		})
	}
}

func rawBundleClose(t *testing.T, first []byte) (int, string) {
	t.Helper()
	commL, _ := net.Listen("tcp", "127.0.0.1:0")
	logsL, _ := net.Listen("tcp", "127.0.0.1:0")
	t.Cleanup(func() { commL.Close(); logsL.Close() })
	var stderr bytes.Buffer
	cmd := exec.Command(bundleBin, "--comm="+commL.Addr().String(), "--logs="+logsL.Addr().String())
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs, _ := logsL.Accept()
	defer logs.Close()
	comm, _ := commL.Accept()
	comm.Write(first)
	comm.Close()
	err := cmd.Wait()
	return exitCode(err), stderr.String()
}

func BenchmarkForkToTerminalPing(b *testing.B) {
	s := &Supervisor{Executable: bundleBin, Env: []string{}}
	for b.Loop() {
		res, err := s.RunTask(context.Background(), TaskRequest{DagID: selftest.DagID, TaskID: "ping"})
		if err != nil || res.State != StateSuccess {
			b.Fatalf("%v %s", err, res.State)
		}
	}
}

func TestSIGTERMBeforeStartupDetailsExitsCleanly(t *testing.T) {
	commL, _ := net.Listen("tcp", "127.0.0.1:0")
	logsL, _ := net.Listen("tcp", "127.0.0.1:0")
	t.Cleanup(func() { commL.Close(); logsL.Close() })
	var stderr bytes.Buffer
	cmd := exec.Command(bundleBin, "--comm="+commL.Addr().String(), "--logs="+logsL.Addr().String())
	cmd.Stderr = &stderr
	// A bad namespace level makes the runtime log a warning as soon as the
	// logs socket connects: reading it tells us the runtime is past dialing
	// and waiting for a first frame that never comes.
	cmd.Env = []string{"AIRFLOW__LOGGING__NAMESPACE_LEVELS=bogus"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs, _ := logsL.Accept()
	defer logs.Close()
	comm, _ := commL.Accept()
	defer comm.Close()
	if _, err := bufio.NewReader(logs).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if code := exitCode(err); code != 1 || !strings.Contains(stderr.String(), "cancelled while waiting for the first frame") {
			t.Fatalf("exit %d stderr %q", code, stderr.String())
		}
	case <-deadline.Context(t).Done():
		cmd.Process.Kill()
		t.Fatal("the bundle ignored SIGTERM while waiting for StartupDetails")
	}
}

func TestCancelKillsAChildThatIgnoresSIGTERM(t *testing.T) {
	self, _ := os.Executable()
	started := make(chan struct{})
	var once sync.Once
	logs := &syncbuf.Buffer{OnWrite: func(p string) {
		if strings.Contains(p, "ignoring SIGTERM") {
			once.Do(func() { close(started) })
		}
	}}
	s := &Supervisor{Executable: self, Env: append(os.Environ(), "SUPERVISOR_TEST_HELPER=ignore-sigterm"), Logs: logs, KillGrace: 100 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	res, err := s.RunTask(ctx, TaskRequest{DagID: "d", TaskID: "t", ShouldRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 128+int(syscall.SIGKILL) || res.State != StateUpForRetry {
		t.Fatalf("want SIGKILL exit and up_for_retry, got exit %d state %s\n%s", res.ExitCode, res.State, logs)
	}
}

func TestConnectionSources(t *testing.T) {
	file := filepath.Join(t.TempDir(), "connections.yaml")
	if err := os.WriteFile(file, []byte("from_file: http://filer:secret-file-pw@files.internal:8080/db\nshadowed: http://shadowed-in-file.internal\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, logs := newSup(t,
		"AIRFLOW_CONN_FROM_URI=postgresql://alice:p%40ss-uri@db.internal:5432/prod",
		"AIRFLOW_CONN_SHADOWED=http://from-env.internal",
		"AIRFLOW_CONN_BROKEN=http://host:notaport",
	)
	s.ConnectionsFile = file
	for conn, want := range map[string]map[string]any{
		"from_uri":  {"conn_type": "postgres", "host": "db.internal", "port": float64(5432), "login": "alice"},
		"from_file": {"conn_type": "http", "host": "files.internal", "port": float64(8080), "login": "filer"},
		"shadowed":  {"host": "from-env.internal"},
	} {
		res := run(t, s, TaskRequest{DagID: selftest.DagID, TaskID: "connection", RunID: "r", Conf: map[string]any{"conn_id": conn}})
		if res.State != StateSuccess {
			t.Fatalf("%s: %s\n%s", conn, res.State, logs)
		}
		v, _, _ := s.GetXCom(selftest.DagID, "r", "connection", "return_value")
		for k, w := range want {
			if got := v.(map[string]any)[k]; got != w {
				t.Errorf("%s: %s = %v, want %v", conn, k, got, w)
			}
		}
	}
	if out := logs.String(); strings.Contains(out, "p@ss-uri") || strings.Contains(out, "secret-file-pw") {
		t.Fatalf("a password reached the shown logs:\n%s", out)
	}
	res := run(t, s, TaskRequest{DagID: selftest.DagID, TaskID: "connection", Conf: map[string]any{"conn_id": "broken"}})
	if res.State != StateFailed || !strings.Contains(logs.String(), "AIRFLOW_CONN_BROKEN is not a valid Airflow connection") {
		t.Fatalf("a malformed AIRFLOW_CONN_ must fail the task and say which variable: %s\n%s", res.State, logs)
	}
}

// A malformed reply after StartupDetails: the forked bundle must print a
// clear error on stderr and exit non-zero without a terminal frame.
func TestBundleExitsNonZeroOnABrokenReplyMidTask(t *testing.T) {
	c := forkRaw(t)
	comm := c.comm
	sd := protocol.StartupDetails{
		TI:     protocol.TaskInstance{ID: newUUID(), DagID: selftest.DagID, TaskID: "connection", RunID: "r", TryNumber: 1, MapIndex: -1},
		DagRun: protocol.DagRun{Conf: map[string]any{"conn_id": "c"}},
	}
	p, _ := protocol.EncodeReply(0, sd.Body(true), nil)
	if err := protocol.WriteFrame(comm, p); err != nil {
		t.Fatal(err)
	}
	// The bound inputs come first, as rendered fields (no reply awaited).
	for _, want := range []string{protocol.TypeSetRenderedFields, protocol.TypeGetConnection} {
		req, err := protocol.ReadFrame(comm)
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := protocol.DecodeMessage(req); m.Type() != want {
			t.Fatalf("want %s next, got %q", want, m.Type())
		}
	}
	comm.Write([]byte{0, 0, 0, 2, 0xc1, 0xc1})
	var rest []string
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			p, err := protocol.ReadFrame(comm)
			if err != nil {
				return
			}
			m, _ := protocol.DecodeMessage(p)
			rest = append(rest, m.Type())
		}
	}()
	if code := c.wait(t, "after a malformed reply"); code == 0 || !strings.Contains(c.stderr.String(), "malformed frame") {
		t.Fatalf("exit %d, stderr %q; want non-zero and the cause", code, c.stderr.String())
	}
	<-readerDone // the bundle's exit closed its end
	if len(rest) != 0 {
		t.Fatalf("no frame may follow a broken reply, got %v", rest)
	}
}

// A password the supervisor served never shows in the task's output, even
// when the task prints it without masking it first.
func TestServedPasswordRedactedFromOutput(t *testing.T) {
	s, logs := newSup(t, "AIRFLOW_CONN_DB=postgres://u:printed-pw-123@db.internal/x")
	res := run(t, s, TaskRequest{DagID: "e2e", TaskID: "print_password"})
	if res.State != StateSuccess {
		t.Fatalf("state %s\n%s", res.State, logs)
	}
	if !slices.Contains(res.Output, "stdout: stdout shows ***") {
		t.Fatalf("want the redacted line in %q", res.Output)
	}
	if strings.Contains(logs.String(), "printed-pw-123") {
		t.Fatalf("the password was shown:\n%s", logs)
	}
}

// A task that ignores cancellation still reports an outcome after SIGTERM,
// before a supervisor with Airflow's escalation delay sends SIGKILL.
func TestSIGTERMOutcomeBeatsAirflowsKillEscalation(t *testing.T) {
	started := make(chan struct{})
	var once sync.Once
	s, logs := newSup(t)
	s.KillGrace = 0 // DefaultKillGrace: Airflow's 5 s escalation delay
	logs.OnWrite = func(p string) {
		if strings.Contains(p, "stubborn task started") {
			once.Do(func() { close(started) })
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-started; cancel() }()
	res, err := s.RunTask(ctx, TaskRequest{DagID: "e2e", TaskID: "stubborn"})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || res.Terminal == nil || res.Terminal["state"] != "failed" {
		t.Fatalf("want TaskState failed and exit 0 before the SIGKILL, got exit %d terminal %v\n%s", res.ExitCode, res.Terminal, logs)
	}
}

// Playing Airflow 3.3 (the default), the supervisor sends no arg_bindings,
// as 3.3's schema migration drops them, and says so; and it refuses a bundle
// whose schema version 3.3 does not know, as 3.3's coordinator does.
func TestAirflow33DropsArgBindingsAndRefusesSchema34(t *testing.T) {
	s, logs := newSup(t)
	res := run(t, s, TaskRequest{DagID: selftest.DagID, TaskID: "connection", RunID: "r33",
		ArgBindings: []protocol.ArgBinding{{Name: "conn_id", Kind: "literal", Value: "anything"}}})
	if res.State != StateFailed || !strings.Contains(logs.String(), "input conn_id is required") {
		t.Fatalf("the argument must not reach the task under 3.3: state %s\n%s", res.State, logs)
	}
	if !strings.Contains(logs.String(), "argument(s) are dropped, as Airflow 3.3 drops them") {
		t.Errorf("dropping the arguments must be said:\n%s", logs)
	}
	s.SchemaVersion = schema.V34
	res, err := s.RunTask(context.Background(), TaskRequest{DagID: selftest.DagID, TaskID: "ping"})
	if err == nil || res.State != StateFailed || !strings.Contains(err.Error(), "Version '2026-10-30' not found in supervisor schema bundle") {
		t.Fatalf("a 2026-10-30 bundle under Airflow 3.3: state %s, %v", res.State, err)
	}
	s.Airflow = "3.4"
	if res := run(t, s, TaskRequest{DagID: selftest.DagID, TaskID: "ping"}); res.State != StateSuccess {
		t.Fatalf("Airflow 3.4 knows 2026-10-30: %s", res.State)
	}
}

// GetDagRunState is answered from DagRunStates, then from what the
// supervisor recorded in StateDir: each run it runs a task of is running,
// SetDagRunState ends it, and a run it never heard of is a 404 as Airflow
// relays one, which the runtime turns into ErrDagRunNotFound.
func TestGetDagRunStateServed(t *testing.T) {
	s, logs := newSup(t)
	s.DagRunStates = map[string]string{"d/seeded": "failed"}
	if err := s.SetDagRunState("d", "manual__2026-12-01T00:00:00+00:00", DagRunSuccess); err != nil {
		t.Fatal(err)
	}
	runs := []string{"d/seeded", "d/manual__2026-12-01T00:00:00+00:00", "e2e/mine", "d/never"}
	res := run(t, s, TaskRequest{DagID: "e2e", TaskID: "run_states", RunID: "mine", Conf: map[string]any{"runs": runs}})
	if res.State != StateSuccess {
		t.Fatalf("state %s\n%s", res.State, logs)
	}
	v, _, _ := s.GetXCom("e2e", "mine", "run_states", "return_value")
	got, _ := v.(map[string]any)
	want := map[string]any{"d/seeded": "failed", "d/manual__2026-12-01T00:00:00+00:00": "success", "e2e/mine": "running", "d/never": "not found"}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %v, want %v (all: %v)", k, got[k], w, got)
		}
	}
	// The record outlives the supervisor: a later one with the same
	// StateDir answers the same.
	again := &Supervisor{StateDir: s.StateDir}
	if st, ok, err := again.DagRunState("d", "manual__2026-12-01T00:00:00+00:00"); err != nil || !ok || st != DagRunSuccess {
		t.Fatalf("a new supervisor reads %q %v %v", st, ok, err)
	}
	if err := s.SetDagRunState("d", "r", "finished"); err == nil {
		t.Fatal("an unknown state must be refused")
	}
}

// Assets and mapping through the local supervisor, as Airflow 3.3 plays
// them: the upstream pushes its list with its length, each mapped
// instance converts its own element and reports its outlet event and name,
// the downstream collects the results in map-index order, and a run the
// event triggers binds its url.
func TestAssetsAndMappingThroughTheSupervisor(t *testing.T) {
	s, _ := newSup(t)
	runID := "manual__assets"
	res := run(t, s, TaskRequest{DagID: "assets", TaskID: "list", RunID: runID})
	if res.State != StateSuccess || res.MappedLength == nil || *res.MappedLength != 3 || len(res.Rejected) > 0 {
		t.Fatalf("list: %s, mapped_length %v, rejected %q", res.State, res.MappedLength, res.Rejected)
	}
	var events []map[string]any
	for _, mi := range []int{2, 0, 1} { // out of order: the slice is by map index
		res := run(t, s, TaskRequest{DagID: "assets", TaskID: "convert", RunID: runID, Mapped: true, MapIndex: mi})
		want := []string{"a.csv", "b.csv", "c.csv"}[mi]
		if res.State != StateSuccess || res.RenderedMapIndex != want || len(res.Rejected) > 0 {
			t.Fatalf("convert[%d]: %s, rendered map index %q, rejected %q", mi, res.State, res.RenderedMapIndex, res.Rejected)
		}
		if len(res.Outlets) != 1 || res.Outlets[0]["uri"] != "file:///converted/" || len(res.OutletEvents) != 1 {
			t.Fatalf("convert[%d]: outlets %v, events %v", mi, res.Outlets, res.OutletEvents)
		}
		if src := res.RenderedFields[protocol.SourcesField].(map[string]any)["url"]; !strings.Contains(src.(string), fmt.Sprintf("element %d", mi)) {
			t.Fatalf("convert[%d]: the rendered source of url is %v", mi, src)
		}
		events = append(events, res.OutletEvents[0])
	}
	res = run(t, s, TaskRequest{DagID: "assets", TaskID: "gather", RunID: runID})
	got, _, _ := s.GetXCom("assets", runID, "gather", "return_value")
	if res.State != StateSuccess || fmt.Sprint(got) != "[file:///converted/a.jsonl file:///converted/b.jsonl file:///converted/c.jsonl]" {
		t.Fatalf("gather: %s, %v", res.State, got)
	}
	extra := events[0]["extra"].(map[string]any)
	res = run(t, s, TaskRequest{DagID: "assets", TaskID: "consume", RunID: "asset_triggered__1", AssetEvents: []protocol.AssetEvent{{
		Asset: protocol.AssetKey{Name: "file:///converted/", URI: "file:///converted/"}, Extra: extra,
		SourceDagID: "assets", SourceRunID: runID, SourceTaskID: "convert", SourceMapIndex: 2, Timestamp: time.Now().UTC(),
	}}})
	got, _, _ = s.GetXCom("assets", "asset_triggered__1", "consume", "return_value")
	if res.State != StateSuccess || got != "read file:///converted/c.jsonl" {
		t.Fatalf("consume: %s, %v", res.State, got)
	}
}

// The checks on outlets hold: what Airflow would not read is rejected.
func TestSupervisorRejectsMalformedOutlets(t *testing.T) {
	for _, c := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"task_outlets": []any{map[string]any{"type": "Asset", "uri": "s3://a"}}}, "needs name and uri"},
		{map[string]any{"task_outlets": []any{map[string]any{"type": "Dataset", "name": "a"}}}, "not Asset"},
		{map[string]any{"outlet_events": []any{map[string]any{"dest_asset_key": map[string]any{"uri": "s3://a"}, "extra": map[string]any{}}}}, "needs name and uri"},
		{map[string]any{"outlet_events": []any{map[string]any{"dest_asset_key": map[string]any{"name": "a", "uri": "s3://a"}}}}, "extra must be an object"},
	} {
		body := map[string]any{"type": protocol.TypeSucceedTask, "end_date": time.Now()}
		for k, v := range c.body {
			body[k] = v
		}
		if why := invalidRequest(body); !strings.Contains(why, c.want) {
			t.Errorf("%v: want %q, got %q", c.body, c.want, why)
		}
	}
	ok := map[string]any{"type": protocol.TypeSucceedTask, "end_date": time.Now(),
		"task_outlets":  []any{map[string]any{"type": "Asset", "name": "a", "uri": "s3://a"}},
		"outlet_events": []any{map[string]any{"dest_asset_key": map[string]any{"name": "a", "uri": "s3://a"}, "extra": map[string]any{"k": 1}}}}
	if why := invalidRequest(ok); why != "" {
		t.Fatalf("a well-formed SucceedTask was rejected: %s", why)
	}
}

// The local supervisor keeps the asset events of the tasks it ran, as the
// Execution API does, and serves GetAssetEventByAsset from them: a later
// task reads the latest events of an asset that did not trigger its run.
func TestSupervisorServesAssetEventsItRecorded(t *testing.T) {
	s, _ := newSup(t)
	runID := "manual__inlets"
	if res := run(t, s, TaskRequest{DagID: "assets", TaskID: "inlets", RunID: runID}); res.State != StateSuccess {
		t.Fatalf("inlets before any event: %s %v", res.State, res.Output)
	}
	if got, _, _ := s.GetXCom("assets", runID, "inlets", "return_value"); got != nil {
		t.Fatalf("inlets read %v before any event was recorded", got)
	}
	run(t, s, TaskRequest{DagID: "assets", TaskID: "list", RunID: runID})
	for mi := range 3 {
		if res := run(t, s, TaskRequest{DagID: "assets", TaskID: "convert", RunID: runID, Mapped: true, MapIndex: mi}); res.State != StateSuccess {
			t.Fatalf("convert[%d]: %s", mi, res.State)
		}
	}
	res := run(t, s, TaskRequest{DagID: "assets", TaskID: "inlets", RunID: runID})
	if res.State != StateSuccess || len(res.Rejected) > 0 {
		t.Fatalf("inlets: %s, rejected %q", res.State, res.Rejected)
	}
	got, _, _ := s.GetXCom("assets", runID, "inlets", "return_value")
	if fmt.Sprint(got) != "[file:///converted/b.jsonl file:///converted/c.jsonl]" {
		t.Fatalf("inlets read %v, want the latest two events, oldest first", got)
	}
}

// A branch's SkipDownstreamTasks reaches the result, which a whole-Dag run
// follows.
func TestSupervisorRecordsABranchsSkips(t *testing.T) {
	s, _ := newSup(t)
	res := run(t, s, TaskRequest{DagID: "branch", TaskID: "choose", RunID: "manual__b", Conf: map[string]any{"way": "right"}})
	if res.State != StateSuccess || len(res.Rejected) > 0 || !slices.Equal(res.SkippedDownstream, []string{"left"}) {
		t.Fatalf("choose: %s, skipped %v, rejected %q", res.State, res.SkippedDownstream, res.Rejected)
	}
}

// A mapped instance of a task that binds no element fails at once through
// the local supervisor as under Airflow.
func TestSupervisorRunsAMappedInstanceWithoutAnElementToFailure(t *testing.T) {
	s, _ := newSup(t)
	res := run(t, s, TaskRequest{DagID: "branch", TaskID: "left", RunID: "manual__m", Mapped: true, MapIndex: 0})
	if res.State != StateFailed {
		t.Fatalf("left[0]: %s, want failed", res.State)
	}
}
