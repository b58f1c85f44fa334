package tasks

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// A local sandbox lives on the worker that created it. Two hosts here are
// two sandbox roots and two host names, as two Celery workers would be:
// provision runs on worker-a, and every task handed its id on worker-b
// (run, export, collect, destroy, an attaching agent) fails naming both
// hosts and the fix, and leaves the sandbox alone; on worker-a they work.
func TestLocalSandboxHandedToAnotherHostFailsNamingBoth(t *testing.T) {
	a, b := newEnv(t), newEnv(t)
	a.drv, b.drv = newDirDriverOn(t, "worker-a"), newDirDriverOn(t, "worker-b")
	a.deps.Backends, b.deps.Backends = a.drv.opener(&a.reqs), b.drv.opener(&b.reqs)
	ctx := context.Background()
	id, err := Provision(ctx, a.deps, ProvisionInput{})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := a.af.xcoms[RecordXComKey].(Record)
	if !strings.HasSuffix(id, "@worker-a") || rec.Host != "worker-a" || !strings.Contains(a.log.String(), `host=worker-a`) {
		t.Fatalf("provision on worker-a returned %q, record %+v; want the host in both and the log", id, rec)
	}
	ref := SandboxRef{ID: id}
	out := "s3://bucket/out.txt"
	tries := map[string]func() error{
		"run": func() error {
			_, err := RunCommands(ctx, b.deps, RunInput{Sandbox: ref, Command: Commands{"true"}})
			return err
		},
		"export": func() error {
			_, err := Export(ctx, b.deps, ExportInput{Sandbox: ref, Exports: map[string]string{"x": out}})
			return err
		},
		"collect": func() error {
			_, err := Collect(ctx, b.deps, CollectInput{Sandbox: ref})
			return err
		},
		"destroy": func() error {
			_, err := Destroy(ctx, b.deps, DestroyInput{Sandbox: ref})
			return err
		},
		"attach": func() error {
			_, _, err := sandbox.NewBackend(b.drv).Attach(ctx, id, b.deps.Run.Owner(), b.deps.Run.Owner()+"/agent")
			return err
		},
	}
	for name, try := range tries {
		err := try()
		if !errors.Is(err, sandbox.ErrOtherHost) {
			t.Errorf("%s on worker-b: want ErrOtherHost, got %v", name, err)
			continue
		}
		if final.Is(err) {
			t.Errorf("%s on worker-b: the error is final, but a retry may run on worker-a: %v", name, err)
		}
		for _, want := range []string{"lives on host worker-a", "runs on host worker-b", "queue only that worker consumes", "remote backend"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s on worker-b: the error does not say %q: %v", name, want, err)
			}
		}
	}
	if alive := a.drv.alive(); !slices.Equal(alive, []string{id}) {
		t.Fatalf("worker-a's sandboxes after worker-b's tries: %v, want %s intact", alive, id)
	}
	// On its own host the same id works to the end.
	if _, err := RunCommands(ctx, a.deps, RunInput{Sandbox: ref, Command: Commands{"true"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := Collect(ctx, a.deps, CollectInput{Sandbox: ref}); err != nil {
		t.Fatal(err)
	}
	if alive := a.drv.alive(); len(alive) != 0 {
		t.Fatalf("collect on worker-a left %v", alive)
	}
}
