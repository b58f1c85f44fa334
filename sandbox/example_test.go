package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/local"
)

// A Go user's whole sandbox life: create one on the local backend
// (bubblewrap), put a file in, run a command on it, destroy it. A task gets
// its Backend from tasks.OpenBackend instead, which reads the backend's
// Airflow connection; the calls on it are the same for Modal and OpenSandbox.
func ExampleBackend_Create() {
	root, err := os.MkdirTemp("", "sandbox-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(root)
	drv, err := local.New(local.Options{Root: root})
	if err != nil {
		fmt.Println(err) // e.g. bubblewrap is not installed: the message says how to get it
		return
	}
	backend := sandbox.NewBackend(drv)
	defer backend.Close()

	ctx := context.Background()
	// The zero-valued network is blocked by default; the lifetime defaults to 1 h.
	sb, err := backend.Create(ctx, sandbox.Spec{Owner: "example_dag/manual__1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sb.Destroy(ctx) // idempotent

	if err := sb.WriteFile(ctx, "in.txt", strings.NewReader("b\na\nc\n"), 0o644); err != nil {
		fmt.Println(err)
		return
	}
	var out strings.Builder
	res, err := sb.Exec(ctx, "sort in.txt", sandbox.ExecOptions{Stdout: &out})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("exit %d\n%s", res.ExitCode, out.String())
	// Output:
	// exit 0
	// a
	// b
	// c
}
