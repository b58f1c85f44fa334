package opensandbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/opensandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/fakeopensandbox"
)

type env struct {
	srv *fakeopensandbox.Server
	drv *opensandbox.Driver
}

func newEnv(t *testing.T, fo fakeopensandbox.Options, tweak func(*opensandbox.Options)) env {
	t.Helper()
	srv := fakeopensandbox.Start(t, fo)
	opts := opensandbox.Options{
		Config: opensandbox.Config{
			Domain: srv.Domain, Protocol: "http", APIKey: srv.APIKey,
			RequestTimeout: 10 * time.Second, UseServerProxy: true,
		},
		ReadyTimeout: 20 * time.Second,
	}
	if tweak != nil {
		tweak(&opts)
	}
	drv, err := opensandbox.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	return env{srv: srv, drv: drv}
}

// ctxT is a test's context: no fixed limit, which a loaded host can miss,
// but the test binary's deadline.
func ctxT(t *testing.T) context.Context { return deadline.Context(t) }

func create(t *testing.T, e env, spec sandbox.Spec) *sandbox.Sandbox {
	t.Helper()
	sb, err := sandbox.NewBackend(e.drv).Create(ctxT(t), spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { sb.Destroy(context.Background()) })
	return sb
}

func TestRoundTrip(t *testing.T) {
	for _, proxy := range []bool{true, false} {
		t.Run(map[bool]string{true: "server proxy", false: "direct endpoint"}[proxy], func(t *testing.T) {
			e := newEnv(t, fakeopensandbox.Options{}, func(o *opensandbox.Options) { o.Config.UseServerProxy = proxy })
			ctx := ctxT(t)
			sb := create(t, e, sandbox.Spec{Owner: "dag/run"})
			var out, errOut bytes.Buffer
			res, err := sb.Exec(ctx, "echo hello; echo; printf partial; echo oops >&2; exit 3", sandbox.ExecOptions{Stdout: &out, Stderr: &errOut})
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != 3 || res.TimedOut {
				t.Fatalf("result %+v", res)
			}
			if out.String() != "hello\n\npartial" || errOut.String() != "oops\n" {
				t.Fatalf("stdout %q stderr %q", out.String(), errOut.String())
			}
			if err := sb.WriteFile(ctx, "dir/a.txt", strings.NewReader("content"), 0o600); err != nil {
				t.Fatal(err)
			}
			rc, size, err := sb.OpenFile(ctx, "dir/a.txt", 100)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(rc)
			rc.Close()
			if string(got) != "content" || size != 7 {
				t.Fatalf("read %q size %d", got, size)
			}
			fi, err := sb.Stat(ctx, "dir/a.txt")
			if err != nil || fi.Mode.Perm() != 0o600 || !fi.IsRegular() {
				t.Fatalf("stat %+v %v", fi, err)
			}
			list, err := sb.List(ctx, "dir")
			if err != nil || len(list) != 1 || list[0].Name != "a.txt" {
				t.Fatalf("list %+v %v", list, err)
			}
		})
	}
}

func TestCreateSendsSpecToServer(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{}, nil)
	create(t, e, sandbox.Spec{
		CPU: 0.5, MemoryMiB: 512, Lifetime: 90 * time.Second, Env: map[string]string{"A": "1"},
		Network: sandbox.NetworkPolicy{AllowHosts: []string{"pypi.org"}}, Owner: "my_dag/manual__2026-11-29T15:58:40+00:00",
	})
	reqs := e.srv.CreateRequests()
	if len(reqs) != 1 {
		t.Fatalf("%d create requests", len(reqs))
	}
	var body map[string]any
	json.Unmarshal(reqs[0], &body)
	rl := body["resourceLimits"].(map[string]any)
	if rl["cpu"] != "500m" || rl["memory"] != "512Mi" {
		t.Fatalf("resourceLimits %v", rl)
	}
	if body["timeout"] != float64(90) {
		t.Fatalf("timeout %v", body["timeout"])
	}
	ep := body["entrypoint"].([]any)
	if len(ep) != 3 || ep[0] != "tail" {
		t.Fatalf("entrypoint %v", ep)
	}
	if body["image"].(map[string]any)["uri"] != "python:3.12-slim" {
		t.Fatalf("image %v", body["image"])
	}
	np := body["networkPolicy"].(map[string]any)
	if np["defaultAction"] != "deny" {
		t.Fatalf("policy %v", np)
	}
	meta := body["metadata"].(map[string]any)
	if meta["created-by"] != "airflow" || !strings.HasPrefix(meta["name"].(string), "airflow-sandbox-") {
		t.Fatalf("metadata %v", meta)
	}
}

func TestErrGoneAfterDestroy(t *testing.T) {
	e := newEnv(t, fakeopensandbox.Options{}, nil)
	ctx := ctxT(t)
	sb := create(t, e, sandbox.Spec{})
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.drv.Destroy(ctx, sb.ID()); err != nil {
		t.Fatalf("second destroy: %v", err)
	}
	if _, err := e.drv.Info(ctx, sb.ID()); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("info after destroy: %v", err)
	}
}
