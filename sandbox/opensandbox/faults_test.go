package opensandbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	osdk "github.com/alibaba/OpenSandbox/sdks/sandbox/go"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/opensandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/eventually"
	"github.com/airflow-sandbox/airflow-go-worker/testing/fakeopensandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/waitwriter"
)

func noSandboxesLeft(t *testing.T, srv *fakeopensandbox.Server) {
	t.Helper()
	if left := srv.Sandboxes(); len(left) != 0 {
		t.Fatalf("%d sandbox(es) leaked on the server: %+v", len(left), left)
	}
}

func TestWrongAPIKeyIsFinal(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{}, func(o *opensandbox.Options) { o.Config.APIKey = "sk-wrong-0123" })
	_, err := sandbox.NewBackend(e.drv).Create(ctxT(t), sandbox.Spec{})
	if err == nil || sandbox.IsRetryable(err) || !errors.Is(err, sandbox.ErrRejected) || !sandbox.IsFinal(err) {
		t.Fatalf("want a final ErrRejected error, got %v", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "HTTP 401 INVALID_API_KEY") || !strings.Contains(msg, "check the API key") || strings.Contains(msg, "sk-wrong-0123") {
		t.Fatalf("message: %s", msg)
	}
	noSandboxesLeft(t, e.srv)
}

func TestCreateFaults(t *testing.T) {
	runtimeErr := func(msg string) fakeopensandbox.Fault {
		return fakeopensandbox.Fault{Status: 500, Code: "RUNTIME_ERROR", Message: msg}
	}
	tests := []struct {
		name      string
		inject    func(*fakeopensandbox.Server)
		wantErr   bool
		retryable bool
		spec      sandbox.Spec
	}{
		{"create 500 is retryable", func(s *fakeopensandbox.Server) { s.FailNext(fakeopensandbox.RouteCreate, 1) }, true, true, sandbox.Spec{}},
		{"create 503 is retryable", func(s *fakeopensandbox.Server) { s.FailNextWith(fakeopensandbox.RouteCreate, 1, 503) }, true, true, sandbox.Spec{}},
		{"create 400 is terminal", func(s *fakeopensandbox.Server) { s.FailNextWith(fakeopensandbox.RouteCreate, 1, 400) }, true, false, sandbox.Spec{}},
		{"create 429 is retryable", func(s *fakeopensandbox.Server) { s.FailNextWith(fakeopensandbox.RouteCreate, 1, 429) }, true, true, sandbox.Spec{}},
		{"endpoint lookup 500 after create", func(s *fakeopensandbox.Server) { s.FailNext(fakeopensandbox.RouteEndpoint, 1) }, true, true, sandbox.Spec{}},
		{"endpoint lookup 403 after create", func(s *fakeopensandbox.Server) { s.FailNextWith(fakeopensandbox.RouteEndpoint, 1, 403) }, true, false, sandbox.Spec{}},
		{"workdir mkdir fails", func(s *fakeopensandbox.Server) { s.FailNext(fakeopensandbox.RouteMkdir, 1) }, true, true, sandbox.Spec{Workdir: "/tmp/job"}},
		{"workdir mkdir over a file", func(s *fakeopensandbox.Server) {
			s.Inject(fakeopensandbox.RouteMkdir, 1, runtimeErr("mkdir /tmp/job: not a directory"))
		}, true, false, sandbox.Spec{Workdir: "/tmp/job"}},
		{"workdir check fails", func(s *fakeopensandbox.Server) { s.FailNext(fakeopensandbox.RouteInfo, 1) }, true, true, sandbox.Spec{}},
		{"workdir is a file", func(*fakeopensandbox.Server) {}, true, false, sandbox.Spec{Workdir: "/etc/passwd"}},
		{"polling errors are waited out", func(s *fakeopensandbox.Server) { s.FailNext(fakeopensandbox.RouteGet, 2) }, false, false, sandbox.Spec{}},
		{"the second poll fails", func(s *fakeopensandbox.Server) {
			s.Inject(fakeopensandbox.RouteGet, 2, fakeopensandbox.Fault{Status: 500})
		}, false, false, sandbox.Spec{}},
		{"ping errors are waited out", func(s *fakeopensandbox.Server) { s.FailNextWith(fakeopensandbox.RoutePing, 3, 502) }, false, false, sandbox.Spec{}},
		{"policy read errors are waited out", func(s *fakeopensandbox.Server) { s.FailNext(fakeopensandbox.RoutePolicy, 2) }, false, false, sandbox.Spec{}},
		{"slow polls are waited out", func(s *fakeopensandbox.Server) { s.SlowNext(fakeopensandbox.RouteGet, 2, 3*time.Second) }, false, false, sandbox.Spec{}},
		{"slow create answer", func(s *fakeopensandbox.Server) { s.SlowNext(fakeopensandbox.RouteCreate, 1, 3*time.Second) }, true, true, sandbox.Spec{}},
		// The SDK tries a GET that timed out on a reused connection once
		// more on a fresh one: one slow answer is survived, two are not.
		{"slow endpoint lookup", func(s *fakeopensandbox.Server) { s.SlowNext(fakeopensandbox.RouteEndpoint, 2, 3*time.Second) }, true, true, sandbox.Spec{}},
		{"one slow endpoint lookup", func(s *fakeopensandbox.Server) { s.SlowNext(fakeopensandbox.RouteEndpoint, 1, 3*time.Second) }, false, false, sandbox.Spec{}},
		{"slow workdir check", func(s *fakeopensandbox.Server) { s.SlowNext(fakeopensandbox.RouteInfo, 2, 3*time.Second) }, true, true, sandbox.Spec{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, fakeopensandbox.Options{}, func(o *opensandbox.Options) { o.Config.RequestTimeout = time.Second })
			tt.inject(e.srv)
			sb, err := sandbox.NewBackend(e.drv).Create(ctxT(t), tt.spec)
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("create: %v", err)
				}
				if err := sb.Destroy(ctxT(t)); err != nil {
					t.Fatal(err)
				}
				noSandboxesLeft(t, e.srv)
				return
			}
			if err == nil {
				t.Fatal("create succeeded")
			}
			if sandbox.IsRetryable(err) != tt.retryable {
				t.Fatalf("retryable = %v, want %v: %v", sandbox.IsRetryable(err), tt.retryable, err)
			}
			noSandboxesLeft(t, e.srv)
		})
	}
}

func TestSlowCreate(t *testing.T) {
	t.Run("waits while Pending", func(t *testing.T) {
		e := newEnv(t, fakeopensandbox.Options{PendingFor: 800 * time.Millisecond}, nil)
		sb := create(t, e, sandbox.Spec{})
		if got := e.srv.Sandboxes(); len(got) != 1 || got[0].State != "Running" || got[0].ID != sb.ID() {
			t.Fatalf("server sandboxes %+v", got)
		}
	})
	t.Run("gives up after the ready timeout and deletes it", func(t *testing.T) {
		e := newEnv(t, fakeopensandbox.Options{PendingFor: time.Hour}, func(o *opensandbox.Options) { o.ReadyTimeout = 700 * time.Millisecond })
		_, err := sandbox.NewBackend(e.drv).Create(ctxT(t), sandbox.Spec{})
		if err == nil || !sandbox.IsRetryable(err) || !strings.Contains(err.Error(), "not Running within") || !strings.Contains(err.Error(), "state Pending") {
			t.Fatalf("err = %v", err)
		}
		noSandboxesLeft(t, e.srv)
	})
}

func TestNetworkPolicyEnforcement(t *testing.T) {
	t.Run("unenforced policy destroys the sandbox", func(t *testing.T) {
		e := newEnv(t, fakeopensandbox.Options{IgnoreNetworkPolicy: true}, nil)
		_, err := sandbox.NewBackend(e.drv).Create(ctxT(t), sandbox.Spec{Network: sandbox.NetworkPolicy{AllowHosts: []string{"pypi.org"}}})
		if !errors.Is(err, sandbox.ErrRefused) || sandbox.IsRetryable(err) || !strings.Contains(err.Error(), "did not enforce") || !strings.Contains(err.Error(), "egress sidecar") {
			t.Fatalf("err = %v", err)
		}
		if len(e.srv.CreateRequests()) != 1 {
			t.Fatal("the policy was never sent")
		}
		noSandboxesLeft(t, e.srv)
	})
	t.Run("open network needs no sidecar", func(t *testing.T) {
		e := newEnv(t, fakeopensandbox.Options{IgnoreNetworkPolicy: true}, nil)
		create(t, e, sandbox.Spec{Network: sandbox.NetworkPolicy{Open: true}})
		if got := e.srv.Sandboxes(); got[0].NetworkPolicy != nil {
			t.Fatalf("open network sent a policy: %+v", got[0].NetworkPolicy)
		}
	})
	t.Run("allowlist is sent and verified", func(t *testing.T) {
		e := newEnv(t, fakeopensandbox.Options{}, nil)
		create(t, e, sandbox.Spec{Network: sandbox.NetworkPolicy{AllowHosts: []string{"pypi.org", "*.pythonhosted.org"}}})
		p := e.srv.Sandboxes()[0].NetworkPolicy
		if p == nil || p.DefaultAction != "deny" || len(p.Egress) != 2 || p.Egress[1].Target != "*.pythonhosted.org" || p.Egress[1].Action != "allow" {
			t.Fatalf("stored policy %+v", p)
		}
	})
	t.Run("dns-only enforcement refused on request", func(t *testing.T) {
		e := newEnv(t, fakeopensandbox.Options{EgressMode: "dns"}, func(o *opensandbox.Options) { o.RequireIPEgressEnforcement = true })
		_, err := sandbox.NewBackend(e.drv).Create(ctxT(t), sandbox.Spec{})
		if !errors.Is(err, sandbox.ErrRefused) || !strings.Contains(err.Error(), "dns+nft") {
			t.Fatalf("err = %v", err)
		}
		noSandboxesLeft(t, e.srv)
	})
	t.Run("dns-only enforcement accepted by default", func(t *testing.T) {
		e := newEnv(t, fakeopensandbox.Options{EgressMode: "dns"}, nil)
		create(t, e, sandbox.Spec{})
	})
}

func TestStreamDropIsRetryableAndInterrupts(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{}, nil)
	sb := create(t, e, sandbox.Spec{})
	e.srv.DropNextStream(3) // init, ping, the first output line
	res, err := sb.Exec(ctxT(t), "echo first; sleep 60", sandbox.ExecOptions{Timeout: 2 * time.Minute})
	if err == nil || !sandbox.IsRetryable(err) || res.SandboxLost || errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("res %+v err %v", res, err)
	}
	if !strings.Contains(err.Error(), "stream broke") {
		t.Fatalf("message: %v", err)
	}
	// The command does not keep running behind the caller's back.
	eventually.True(t, "the command to be interrupted", func() bool { return e.srv.RunningCommands() == 0 })
	if _, err := e.drv.Info(ctxT(t), sb.ID()); err != nil {
		t.Fatalf("the sandbox should survive a dropped stream: %v", err)
	}
}

func TestSandboxVanishesMidCommand(t *testing.T) {
	for _, proxy := range []bool{true, false} {
		t.Run(map[bool]string{true: "server proxy", false: "direct"}[proxy], func(t *testing.T) {
			e := newEnv(t, fakeopensandbox.Options{}, func(o *opensandbox.Options) { o.Config.UseServerProxy = proxy })
			sb := create(t, e, sandbox.Spec{})
			e.srv.VanishDuringNextCommand()
			res, err := sb.Exec(ctxT(t), "echo started; sleep 60", sandbox.ExecOptions{Timeout: 2 * time.Minute})
			if !res.SandboxLost || !errors.Is(err, sandbox.ErrGone) || sandbox.IsRetryable(err) {
				t.Fatalf("res %+v err %v", res, err)
			}
			noSandboxesLeft(t, e.srv)
			if _, err := sb.Exec(ctxT(t), "true", sandbox.ExecOptions{}); !errors.Is(err, sandbox.ErrGone) {
				t.Fatalf("exec after vanishing: %v", err)
			}
		})
	}
}

func TestCancelInterruptsCommand(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{}, nil)
	sb := create(t, e, sandbox.Spec{})
	ctx, cancel := context.WithCancel(ctxT(t))
	out := waitwriter.New("started")
	go func() {
		<-out.Seen()
		cancel()
	}()
	_, err := sb.Exec(ctx, "echo started; sleep 60", sandbox.ExecOptions{Stdout: out, Timeout: 2 * time.Minute})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	eventually.True(t, "the command to be interrupted", func() bool { return e.srv.RunningCommands() == 0 })
	if _, err := e.drv.Info(ctxT(t), sb.ID()); err != nil {
		t.Fatalf("the sandbox should survive: %v", err)
	}
}

func TestExecFaults(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{}, nil)
	sb := create(t, e, sandbox.Spec{})
	e.srv.FailNext(fakeopensandbox.RouteCommand, 1)
	if _, err := sb.Exec(ctxT(t), "true", sandbox.ExecOptions{}); err == nil || !sandbox.IsRetryable(err) {
		t.Fatalf("500 on POST /command: %v", err)
	}
	_, err := sb.Exec(ctxT(t), "true", sandbox.ExecOptions{Workdir: "/no/such/dir"})
	if err == nil || sandbox.IsRetryable(err) || !strings.Contains(err.Error(), "INVALID_REQUEST_BODY") || !strings.Contains(err.Error(), "workdir") {
		t.Fatalf("bad cwd: %v", err)
	}
	// It still works afterwards.
	var out bytes.Buffer
	if res, err := sb.Exec(ctxT(t), "echo ok", sandbox.ExecOptions{Stdout: &out}); err != nil || res.ExitCode != 0 || out.String() != "ok\n" {
		t.Fatalf("after faults: %+v %v %q", res, err, out.String())
	}
}

func TestFileFaults(t *testing.T) {
	// VersionMain: files/info serves Stat there, so its faults reach it.
	e := newEnv(t, fakeopensandbox.Options{Version: fakeopensandbox.VersionMain}, nil)
	ctx := ctxT(t)
	sb := create(t, e, sandbox.Spec{})
	e.srv.FailNext(fakeopensandbox.RouteUpload, 1)
	if err := sb.WriteFile(ctx, "f", strings.NewReader("x"), 0); err == nil || !sandbox.IsRetryable(err) {
		t.Fatalf("upload 500: %v", err)
	}
	if err := sb.WriteFile(ctx, "f", strings.NewReader("x"), 0); err != nil {
		t.Fatal(err)
	}
	e.srv.FailNextWith(fakeopensandbox.RouteDownload, 1, 503)
	if _, _, err := sb.OpenFile(ctx, "f", 10); err == nil || !sandbox.IsRetryable(err) {
		t.Fatalf("download 503: %v", err)
	}
	e.srv.FailNextWith(fakeopensandbox.RouteInfo, 1, 400)
	if _, err := sb.Stat(ctx, "f"); err == nil || sandbox.IsRetryable(err) {
		t.Fatalf("info 400 must be terminal: %v", err)
	}
	// A symlink write replaces the link, not its target.
	if _, err := sb.Exec(ctx, "echo target > t.txt && ln -s t.txt link", sandbox.ExecOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile(ctx, "link", strings.NewReader("new"), 0); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sb.Exec(ctx, "cat t.txt; test -L link || echo not-a-link", sandbox.ExecOptions{Stdout: &out})
	if out.String() != "target\nnot-a-link\n" {
		t.Fatalf("after writing through a symlink: %q", out.String())
	}
	// Reading through a symlink to a regular file works; to a directory is ErrIsDir.
	sb.Exec(ctx, "ln -s t.txt link2 && mkdir d && ln -s d dlink", sandbox.ExecOptions{})
	rc, size, err := sb.OpenFile(ctx, "link2", 100)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "target\n" || size != 7 {
		t.Fatalf("through symlink: %q %d", b, size)
	}
	if _, _, err := sb.OpenFile(ctx, "dlink", 100); !errors.Is(err, sandbox.ErrIsDir) {
		t.Fatalf("symlink to dir: %v", err)
	}
	if _, _, err := sb.OpenFile(ctx, "link2", 3); !errors.Is(err, sandbox.ErrTooLarge) {
		t.Fatalf("symlink over the limit: %v", err)
	}
}

func TestDestroyAndExpiry(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{}, nil)
	ctx := ctxT(t)
	sb := create(t, e, sandbox.Spec{})
	e.srv.FailNext(fakeopensandbox.RouteDelete, 1)
	if err := sb.Destroy(ctx); err == nil || !sandbox.IsRetryable(err) {
		t.Fatalf("delete 500: %v", err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	noSandboxesLeft(t, e.srv)

	// Expiry removes the sandbox: everything is ErrGone afterwards.
	sb2 := create(t, e, sandbox.Spec{})
	e.srv.Vanish(sb2.ID())
	if _, err := e.drv.Tags(ctx, sb2.ID()); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("tags after expiry: %v", err)
	}
	if _, err := sb2.Stat(ctx, "/workspace"); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("stat after expiry: %v", err)
	}
}

func TestRenew(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{}, nil)
	ctx := ctxT(t)
	sb := create(t, e, sandbox.Spec{Lifetime: 2 * time.Minute})
	at, err := e.drv.Renew(ctx, sb.ID(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(at); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("renewed to %v", at)
	}
	tags, _ := e.drv.Tags(ctx, sb.ID())
	if !sandbox.ExpiresAt(tags).Equal(at.Truncate(time.Second)) {
		t.Fatalf("airflow_expires_at %s, server %v", tags[sandbox.TagExpiresAt], at)
	}
	if got := e.srv.Sandboxes()[0].ExpiresAt; !got.Equal(at) {
		t.Fatalf("server expiry %v, renewed %v", got, at)
	}
}

// Direct endpoints need the headers the lookup returned (here execd's
// access token, as a gateway in front of the server hands it out); the
// SDK's client without them gets execd's 401.
func TestEndpointHeadersAreRequired(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{ExecdToken: "tok-" + sandbox.RandomHex(8)}, func(o *opensandbox.Options) { o.Config.UseServerProxy = false })
	ctx := ctxT(t)
	sb := create(t, e, sandbox.Spec{})
	ep, err := e.drv.Lifecycle().GetEndpoint(ctx, sb.ID(), opensandbox.ExecdPort, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(ep.Endpoint, "://") || len(ep.Headers) == 0 {
		t.Fatalf("endpoint %+v", ep)
	}
	err = osdk.NewExecdClient("http://"+ep.Endpoint, "").Ping(ctx)
	var api *osdk.APIError
	if !errors.As(err, &api) || api.StatusCode != 401 || !strings.Contains(err.Error(), "Unauthorized") {
		t.Fatalf("err = %v", err)
	}
	if err := osdk.NewExecdClient("http://"+ep.Endpoint, "", osdk.WithHeaders(ep.Headers)).Ping(ctx); err != nil {
		t.Fatal(err)
	}
	// The driver's own client carries them.
	ex, err := e.drv.Execd(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	if err := ex.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

// A live stream straight from the fake, read by the SDK client the driver
// hands out.
func TestLiveStream(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{}, nil)
	ctx := ctxT(t)
	sb := create(t, e, sandbox.Spec{})
	ex, err := e.drv.Execd(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	streams := map[string][]string{}
	code := ""
	err = ex.RunCommand(ctx, osdk.RunCommandRequest{Command: "echo a; echo; printf b; echo c >&2; exit 3", Cwd: "/workspace", Timeout: 60000}, func(se osdk.StreamEvent) error {
		var ev struct {
			Type  string `json:"type"`
			Text  string `json:"text"`
			Error *struct {
				Value string `json:"evalue"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(se.Data), &ev); err != nil || ev.Type != se.Event {
			return fmt.Errorf("event %q (%q): %v", se.Data, se.Event, err)
		}
		if ev.Type == "init" && len(ev.Text) != 32 {
			return fmt.Errorf("init id %q", ev.Text)
		}
		if ev.Type == "error" {
			code = ev.Error.Value
			return io.EOF
		}
		streams[ev.Type] = append(streams[ev.Type], ev.Text)
		return nil
	})
	if err != io.EOF || code != "3" {
		t.Fatalf("stream ended with %v, exit %q (%v)", err, code, streams)
	}
	// Order between stdout and stderr is not guaranteed; within each it is.
	if got := strings.Join(streams["stdout"], "|"); got != "a|\n|b" {
		t.Fatalf("stdout events %q", got)
	}
	if got := strings.Join(streams["stderr"], "|"); got != "c" {
		t.Fatalf("stderr events %q", got)
	}
	if len(streams["init"]) != 1 || len(streams["ping"]) != 1 {
		t.Fatalf("events %v", streams)
	}
}

// A task stopped while its sandbox is still starting leaves nothing behind.
func TestCancelDuringCreateDeletes(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{PendingFor: time.Hour}, nil)
	ctx, cancel := context.WithCancel(ctxT(t))
	go func() {
		// Cancel once the server has the sandbox (or near the test's
		// deadline, to never hang; the assertions below then fail).
		eventually.Holds(t, func() bool { return len(e.srv.Sandboxes()) > 0 })
		cancel()
	}()
	_, err := sandbox.NewBackend(e.drv).Create(ctx, sandbox.Spec{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if len(e.srv.CreateRequests()) != 1 {
		t.Fatal("cancelled before the sandbox existed; the test proves nothing")
	}
	noSandboxesLeft(t, e.srv)
}

// A sandbox that reaches its lifetime is removed by the server; the
// driver then reports ErrGone, terminal.
func TestExpiredSandboxIsGone(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{Lifetime: 2 * time.Second}, nil)
	sb := create(t, e, sandbox.Spec{})
	eventually.True(t, "expiry", func() bool { return len(e.srv.Sandboxes()) == 0 })
	_, err := sb.Exec(ctxT(t), "true", sandbox.ExecOptions{})
	if !errors.Is(err, sandbox.ErrGone) || sandbox.IsRetryable(err) {
		t.Fatalf("exec after expiry: %v", err)
	}
}

// The create call's answer is lost after the server made the sandbox: the
// driver finds it by name and deletes it, and the error is retryable.
func TestLostCreateAnswerLeaksNothing(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{}, nil)
	e.srv.LoseNextCreateAnswer()
	_, err := sandbox.NewBackend(e.drv).Create(ctxT(t), sandbox.Spec{})
	if err == nil || !sandbox.IsRetryable(err) {
		t.Fatalf("err = %v", err)
	}
	if len(e.srv.CreateRequests()) != 1 {
		t.Fatal("the create never reached the server")
	}
	noSandboxesLeft(t, e.srv)
}

// A sandbox that fails while starting is a terminal error naming the
// server's reason, and it is deleted.
func TestFailedWhileStarting(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{PendingFor: time.Hour}, nil)
	go func() {
		eventually.Holds(t, func() bool {
			sbs := e.srv.Sandboxes()
			if len(sbs) == 1 {
				e.srv.SetState(sbs[0].ID, "Failed", "IMAGE_PULL_ERROR")
			}
			return len(sbs) == 1
		})
	}()
	_, err := sandbox.NewBackend(e.drv).Create(ctxT(t), sandbox.Spec{})
	if err == nil || sandbox.IsRetryable(err) || !strings.Contains(err.Error(), "Failed (IMAGE_PULL_ERROR") {
		t.Fatalf("err = %v", err)
	}
	noSandboxesLeft(t, e.srv)
}

// Unknown states are waited out, like Pending.
func TestUnknownStateIsTolerated(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{PendingFor: time.Hour}, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var sbs []fakeopensandbox.Sandbox
		if !eventually.Holds(t, func() bool { sbs = e.srv.Sandboxes(); return len(sbs) == 1 }) {
			return // the assertion below fails
		}
		e.srv.SetState(sbs[0].ID, "Warming", "")
		// Let the driver poll the unknown state twice.
		n := e.srv.Calls(fakeopensandbox.RouteGet)
		eventually.Holds(t, func() bool { return e.srv.Calls(fakeopensandbox.RouteGet) >= n+2 })
		e.srv.SetState(sbs[0].ID, "Running", "")
	}()
	create(t, e, sandbox.Spec{})
	<-done
	if e.srv.Sandboxes()[0].State != "Running" {
		t.Fatal("the state was never forced; the test proves nothing")
	}
}

// Another process (a later task) reaches a sandbox through its id alone:
// the execd endpoint and the workdir come from the server.
func TestSecondDriverUsesWorkdirFromTags(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{}, nil)
	ctx := ctxT(t)
	sb := create(t, e, sandbox.Spec{Workdir: "/tmp/job"})
	other, err := opensandbox.New(opensandbox.Options{Config: e.drv.Config()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var out bytes.Buffer
	res, err := sandbox.NewBackend(other).Open(sb.ID()).Exec(ctx, "pwd", sandbox.ExecOptions{Stdout: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "/tmp/job\n" {
		t.Fatalf("pwd from a second driver: %q %+v %v", out.String(), res, err)
	}
	// Tags survive for it too, and a gone sandbox is ErrGone for SetTags.
	tags, err := other.Tags(ctx, sb.ID())
	if err != nil || tags[sandbox.TagWorkdir] != "/tmp/job" {
		t.Fatalf("tags %v %v", tags, err)
	}
	e.srv.SetState(sb.ID(), "Terminated", "CONTAINER_EXITED")
	if err := other.SetTags(ctx, sb.ID(), tags); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("set tags on a terminated sandbox: %v", err)
	}
	if _, err := other.ListSandboxes(ctx, map[string]string{"bad key": "v"}); err == nil {
		t.Fatal("a tag name that cannot be metadata was accepted as a filter")
	}
}

// A download cut mid-body fails the read with a retryable error instead of
// passing off a short file as whole.
func TestCutDownloadIsRetryable(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{}, nil)
	ctx := ctxT(t)
	sb := create(t, e, sandbox.Spec{})
	if err := sb.WriteFile(ctx, "big.bin", bytes.NewReader(make([]byte, 1<<20)), 0); err != nil {
		t.Fatal(err)
	}
	e.srv.CutNextDownload(1000)
	rc, size, err := sb.OpenFile(ctx, "big.bin", 2<<20)
	if err != nil || size != 1<<20 {
		t.Fatalf("open: %d %v", size, err)
	}
	n, err := io.Copy(io.Discard, rc)
	rc.Close()
	if err == nil || !sandbox.IsRetryable(err) || n >= 1<<20 {
		t.Fatalf("read %d bytes, err %v", n, err)
	}
}

// A single output line beyond the stream bound stops the command with a
// terminal error instead of growing memory without end.
func TestOverlongOutputLine(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{}, nil)
	sb := create(t, e, sandbox.Spec{})
	_, err := sb.Exec(ctxT(t), "head -c 17000000 /dev/zero | tr '\\0' x; echo", sandbox.ExecOptions{Timeout: time.Minute})
	if err == nil || sandbox.IsRetryable(err) || !strings.Contains(err.Error(), "longer than 16 MiB") {
		t.Fatalf("err = %v", err)
	}
	if _, err := e.drv.Info(ctxT(t), sb.ID()); err != nil {
		t.Fatalf("the sandbox should survive: %v", err)
	}
}

func TestFailedStartRemovesTheStdinFile(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{}, nil)
	sb := create(t, e, sandbox.Spec{})
	e.srv.FailNextWith(fakeopensandbox.RouteCommand, 1, 400)
	_, err := sb.Exec(ctxT(t), "cat", sandbox.ExecOptions{Stdin: strings.NewReader("input-secret")})
	if err == nil {
		t.Fatal("the injected failure did not reach the caller")
	}
	var out bytes.Buffer
	if _, err := sb.Exec(ctxT(t), "ls -A /tmp", sandbox.ExecOptions{Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), ".airflow-stdin-") {
		t.Fatalf("a command that never started left its stdin file behind: %q", out.String())
	}
}

// Under failures mid-transfer the driver reports an error, never a short
// file or a partial line as complete, and never waits on a silent server.
func TestTransfersUnderFaults(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{}, func(o *opensandbox.Options) {
		// Well above what a loaded 2-core CI machine stalls a healthy
		// transfer for (500 ms failed there once), well below the test's
		// deadline; the injected stalls never end, so any guard catches them.
		o.StallTimeout = 1500 * time.Millisecond
		o.Config.RequestTimeout = 5 * time.Second
	})
	ctx := ctxT(t)
	sb := create(t, e, sandbox.Spec{})
	const size = 1 << 20
	if err := sb.WriteFile(ctx, "big.bin", bytes.NewReader(bytes.Repeat([]byte("a"), size)), 0o644); err != nil {
		t.Fatal(err)
	}
	read := func() (int64, error) {
		rc, _, err := sb.OpenFile(ctx, "big.bin", 2*size)
		if err != nil {
			return 0, err
		}
		defer rc.Close()
		return io.Copy(io.Discard, rc)
	}
	t.Run("download stalls", func(t *testing.T) {
		e.srv.StallNextDownload(1000)
		n, err := read()
		if err == nil || !sandbox.IsRetryable(err) || n >= size || !strings.Contains(err.Error(), "sent nothing") {
			t.Fatalf("read %d bytes, err %v", n, err)
		}
		if n, err := read(); err != nil || n != size {
			t.Fatalf("the next read: %d %v", n, err)
		}
	})
	t.Run("slow download still completes", func(t *testing.T) {
		e.srv.SlowNext(fakeopensandbox.RouteDownload, 1, 300*time.Millisecond)
		if n, err := read(); err != nil || n != size {
			t.Fatalf("read %d, %v", n, err)
		}
	})
	t.Run("upload cut mid-body", func(t *testing.T) {
		e.srv.CutNextUpload(4096)
		err := sb.WriteFile(ctx, "big.bin", bytes.NewReader(bytes.Repeat([]byte("b"), size)), 0o644)
		if err == nil || !sandbox.IsRetryable(err) {
			t.Fatalf("a cut upload: %v", err)
		}
		if got := sh(t, sb, "tr -d a < big.bin | wc -c; wc -c < big.bin"); got != "0\n1048576\n" {
			t.Fatalf("a cut upload changed the file: %q", got)
		}
	})
	t.Run("stream dropped mid-event", func(t *testing.T) {
		e.srv.DropNextStreamMidEvent(3) // init, ping, "one"; then half an event
		var out bytes.Buffer
		res, err := sb.Exec(ctx, "echo one; echo two; sleep 60", sandbox.ExecOptions{Stdout: &out, Timeout: 2 * time.Minute})
		if err == nil || !sandbox.IsRetryable(err) || res.SandboxLost {
			t.Fatalf("res %+v err %v", res, err)
		}
		if out.String() != "one\n" {
			t.Fatalf("stdout %q: only whole events may reach the caller", out.String())
		}
		eventually.True(t, "the command to be interrupted", func() bool { return e.srv.RunningCommands() == 0 })
	})
	t.Run("stream stalls", func(t *testing.T) {
		e.srv.StallNextStream(3)
		_, err := sb.Exec(ctx, "echo one; sleep 60", sandbox.ExecOptions{Timeout: 2 * time.Minute})
		if err == nil || !sandbox.IsRetryable(err) || !strings.Contains(err.Error(), "sent nothing") {
			t.Fatalf("err %v", err)
		}
		eventually.True(t, "the command to be interrupted", func() bool { return e.srv.RunningCommands() == 0 })
	})
	t.Run("slow destroy", func(t *testing.T) {
		other := create(t, e, sandbox.Spec{})
		e.srv.SlowNext(fakeopensandbox.RouteDelete, 1, 8*time.Second) // over RequestTimeout
		if err := other.Destroy(ctx); err == nil || !sandbox.IsRetryable(err) {
			t.Fatalf("a destroy that timed out: %v", err)
		}
		if err := other.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
		for _, left := range e.srv.Sandboxes() {
			if left.ID == other.ID() {
				t.Fatal("the sandbox was left behind")
			}
		}
	})
}
