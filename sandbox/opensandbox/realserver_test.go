package opensandbox_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/opensandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/eventually"
	"github.com/airflow-sandbox/airflow-go-worker/testing/fakeopensandbox"
)

// What the driver does with opensandbox-server's own answers (the fake
// gives them as the real server on Docker does; e2e/opensandbox meets
// the real ones).

// An image the server has not got fails the task at once: final, one
// create, nothing left, and the message says what to do.
func TestImageNotOnTheServerIsFinal(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{Images: []string{"python:3.12-slim"}}, nil)
	_, err := sandbox.NewBackend(e.drv).Create(ctxT(t), sandbox.Spec{Image: "agw/not-there:1"})
	if err == nil || !sandbox.IsFinal(err) || sandbox.IsRetryable(err) || !errors.Is(err, sandbox.ErrRejected) {
		t.Fatalf("want a final error, got %v", err)
	}
	for _, want := range []string{"agw/not-there:1", "not on the OpenSandbox server", "retrying will not help"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if n := len(e.srv.CreateRequests()); n != 1 {
		t.Errorf("%d create requests, want 1", n)
	}
	noSandboxesLeft(t, e.srv)
}

// A lifetime over the server's cap is final and names the setting.
func TestLifetimeOverTheServersCap(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{MaxTimeout: time.Hour}, nil)
	_, err := sandbox.NewBackend(e.drv).Create(ctxT(t), sandbox.Spec{Lifetime: 2 * time.Hour})
	if err == nil || !sandbox.IsFinal(err) || !strings.Contains(err.Error(), "max_sandbox_timeout_seconds") || !strings.Contains(err.Error(), "7200s exceeds configured maximum of 3600s") {
		t.Fatalf("want a final error naming max_sandbox_timeout_seconds, got %v", err)
	}
	noSandboxesLeft(t, e.srv)
	create(t, e, sandbox.Spec{Lifetime: time.Hour})
}

// In the second the real server reports an expired sandbox as Failed
// before it is gone, the sandbox is gone to the driver already.
func TestFailedAtExpiryIsGone(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{Lifetime: 2 * time.Second, ExpiredFor: time.Hour}, nil)
	sb := create(t, e, sandbox.Spec{})
	eventually.True(t, "expiry (state Failed)", func() bool {
		s := e.srv.Sandboxes()
		return len(s) == 1 && s[0].State == "Failed"
	})
	_, err := sb.Exec(ctxT(t), "true", sandbox.ExecOptions{})
	if !errors.Is(err, sandbox.ErrGone) || sandbox.IsRetryable(err) {
		t.Fatalf("exec while the server says Failed: %v", err)
	}
	if _, err := sandbox.NewBackend(e.drv).Open(sb.ID()).Info(ctxT(t)); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("info while the server says Failed: %v", err)
	}
	if err := sb.Destroy(ctxT(t)); err != nil {
		t.Fatalf("destroy of an expired sandbox: %v", err)
	}
}

// A create the server answers only once the sandbox is up (seconds, on
// Docker) is waited for within the request timeout.
func TestCreateAnsweredOnceUp(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{CreateLatency: 1500 * time.Millisecond}, nil)
	sb := create(t, e, sandbox.Spec{})
	if res, err := sb.Exec(ctxT(t), "true", sandbox.ExecOptions{}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec after a slow create: %+v %v", res, err)
	}
}

// Both endpoint modes work when the server hands out its shapes: the
// proxy under /v1, the sandbox's own port with execd's /proxy route.
func TestRealEndpointShapes(t *testing.T) {
	for _, proxy := range []bool{true, false} {
		e := newEnv(t, fakeopensandbox.Options{OverlayFS: true}, func(o *opensandbox.Options) { o.Config.UseServerProxy = proxy })
		sb := create(t, e, sandbox.Spec{})
		if err := sb.WriteFile(ctxT(t), "d/f", strings.NewReader("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := sb.OpenFile(ctxT(t), "d", 10); !errors.Is(err, sandbox.ErrIsDir) {
			t.Fatalf("open a directory: %v", err)
		}
	}
}
