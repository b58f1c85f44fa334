package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

func newDriverOn(t *testing.T, root, host string) *Driver {
	t.Helper()
	d, err := New(Options{Root: root, Host: host})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// A sandbox's id names the host it lives on, and its tags say so too. On
// another host (another root) every operation on it is ErrOtherHost naming
// both hosts, Destroy included (it must not report a sandbox it never
// reached as gone). The same root under a new host name (the host was
// renamed) still finds it, and so do ids from before ids named a host.
func TestSandboxIDsNameTheirHost(t *testing.T) {
	ctx := context.Background()
	rootA := t.TempDir()
	a, b := newDriverOn(t, rootA, "worker-a"), newDriverOn(t, t.TempDir(), "worker-b")
	sb := create(t, a, sandbox.Spec{Lifetime: time.Hour})
	id := sb.ID()
	info, err := a.Info(ctx, id)
	if err != nil || id != info.Name+"@worker-a" || info.Tags[sandbox.TagHost] != "worker-a" {
		t.Fatalf("id %q, info %+v (%v); want <name>@worker-a and tag airflow_host=worker-a", id, info, err)
	}
	ops := map[string]func() error{
		"info": func() error { _, err := b.Info(ctx, id); return err },
		"tags": func() error { _, err := b.Tags(ctx, id); return err },
		"exec": func() error {
			_, err := b.Exec(ctx, id, sandbox.ExecRequest{Command: "true", Timeout: time.Minute})
			return err
		},
		"stat":    func() error { _, err := b.Stat(ctx, id, "/workspace"); return err },
		"destroy": func() error { return b.Destroy(ctx, id) },
	}
	for name, op := range ops {
		err := op()
		if !errors.Is(err, sandbox.ErrOtherHost) || !strings.Contains(err.Error(), "lives on host worker-a") || !strings.Contains(err.Error(), "runs on host worker-b") {
			t.Errorf("%s on worker-b: %v", name, err)
		}
	}
	if _, err := a.Info(ctx, id); err != nil {
		t.Fatalf("worker-b's tries touched the sandbox: %v", err)
	}
	renamed := newDriverOn(t, rootA, "worker-a-renamed")
	if _, err := renamed.Tags(ctx, id); err != nil {
		t.Fatalf("the same root under a new host name: %v", err)
	}
	if _, err := a.Tags(ctx, info.Name); err != nil {
		t.Fatalf("the bare name, as ids were before: %v", err)
	}
	list, err := a.ListSandboxes(ctx, nil)
	if err != nil || len(list) != 1 || list[0].ID != id {
		t.Fatalf("listed %v (%v), want %s", list, err, id)
	}
	if err := a.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(rootA, info.Name)); !os.IsNotExist(err) {
		t.Fatalf("destroyed sandbox still on disk: %v", err)
	}
}

// A host name that cannot stand in an id is refused when the driver
// starts, saying what to set.
func TestHostNameMustFitAnID(t *testing.T) {
	for _, host := range []string{"a@b", "has space", strings.Repeat("h", 254)} {
		_, err := New(Options{Root: t.TempDir(), Host: host})
		if err == nil || !strings.Contains(err.Error(), "AIRFLOW_GO_WORKER_HOSTNAME") {
			t.Errorf("host %q: %v", host, err)
		}
	}
}
