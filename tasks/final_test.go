package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// execFails is the test backend with every Exec failing with err, as a
// backend's answer would.
type execFails struct {
	*dirDriver
	err error
}

func (d execFails) Exec(context.Context, string, driver.ExecRequest) (driver.ExecResult, error) {
	return driver.ExecResult{}, d.err
}

// Which task errors are final (the runtime fails the task without
// Airflow's retries) and which are left to Airflow's retries: every class
// of final error the tasks meet, and the transient and unknown ones that
// must stay retried.
func TestFinalErrorsAndRetriedErrors(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.af.conns["web"] = connections.Connection{ConnID: "web", ConnType: "http", Password: "pw"}
	id, err := Provision(ctx, e.deps, ProvisionInput{})
	if err != nil {
		t.Fatal(err)
	}
	runWith := func(backendErr error) func() error {
		return func() error {
			d := e.deps
			d.Backends = backendsFor(execFails{e.drv, backendErr}, nil)
			_, err := RunCommands(ctx, d, RunInput{Sandbox: SandboxRef{ID: id}, Command: Commands{"true"}})
			return err
		}
	}
	provisionWith := func(in ProvisionInput) func() error {
		return func() error { _, err := Provision(ctx, e.deps, in); return err }
	}
	for _, c := range []struct {
		name  string
		call  func() error
		final bool
	}{
		{"refused spec", provisionWith(ProvisionInput{BackendOptions: BackendOptions{Backend: "local"}, GPU: "A10G"}), true},
		{"unlinked backend", provisionWith(ProvisionInput{BackendOptions: BackendOptions{Backend: "k8s"}}), true},
		{"misspelt backend option", provisionWith(ProvisionInput{BackendOptions: BackendOptions{Options: map[string]json.RawMessage{"local": json.RawMessage(`{"flgx": "x"}`)}}}), true},
		{"bad input: env_from with two sources", provisionWith(ProvisionInput{EnvFrom: map[string]EnvSource{"X": {Connection: "web", Variable: "v"}}}), true},
		{"bad input: not a storage URL", provisionWith(ProvisionInput{StageIn: map[string]string{"in.csv": "bucket/in.csv"}}), true},
		{"bad input: unknown URL scheme", provisionWith(ProvisionInput{StageIn: map[string]string{"in.csv": "ftp://host/in.csv"}}), true},
		{"bad input: nothing to run", func() error {
			_, err := RunCommands(ctx, e.deps, RunInput{Sandbox: SandboxRef{ID: id}})
			return err
		}, true},
		{"bad input: nothing to export", func() error {
			_, err := Export(ctx, e.deps, ExportInput{Sandbox: SandboxRef{ID: id}})
			return err
		}, true},
		{"missing connection (env_from)", provisionWith(ProvisionInput{EnvFrom: map[string]EnvSource{"X": {Connection: "nope"}}}), true},
		{"missing connection (backend)", provisionWith(ProvisionInput{BackendOptions: BackendOptions{Backend: "opensandbox"}}), true},
		{"missing connection (storage)", provisionWith(ProvisionInput{StageIn: map[string]string{"in.csv": "s3://b/in.csv"}, StorageConnID: "nope"}), true},
		{"wrong connection type (storage)", provisionWith(ProvisionInput{StageIn: map[string]string{"in.csv": "s3://b/in.csv"}, StorageConnID: "web"}), true},
		{"missing object", provisionWith(ProvisionInput{StageIn: map[string]string{"in.csv": "s3://b/missing.csv"}}), true},
		{"sandbox owned by another run", func() error {
			_, err := RunCommands(ctx, e.deps, RunInput{Sandbox: SandboxRef{ID: id}, Command: Commands{"true"}, Owner: "other/run"})
			return err
		}, true},
		{"backend's deterministic answer (ErrRejected)", runWith(sandbox.Rejected(errors.New("execd: path is a directory"))), true},
		{"sandbox gone", runWith(&sandbox.Error{Op: "exec", Kind: sandbox.ErrGone}), true},
		{"transient backend error", runWith(sandbox.Retryable(errors.New("503 Service Unavailable"))), false},
		{"unknown backend error", runWith(errors.New("bubblewrap could not set up the sandbox")), false},
		{"command exits non-zero", func() error {
			_, err := RunCommands(ctx, e.deps, RunInput{Sandbox: SandboxRef{ID: id}, Command: Commands{"exit 3"}})
			return err
		}, false},
		{"masker unreachable", func() error {
			e.af.failMask = errors.New("the comm socket closed")
			defer func() { e.af.failMask = nil }()
			_, err := Provision(ctx, e.deps, ProvisionInput{EnvFrom: map[string]EnvSource{"X": {Connection: "web"}}})
			return err
		}, false},
	} {
		err := c.call()
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if got := final.Is(err); got != c.final {
			t.Errorf("%s: final %v, want %v: %v", c.name, got, c.final, err)
		}
	}
}
