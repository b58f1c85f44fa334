// Command testbundle is a plain Go bundle for the real-task-SDK tests
// (e2e/realsdk). Built twice with -ldflags "-X main.variant=a" (and b), it
// gives two bundles that each own a Dag and share one, to show how Airflow
// 3.3's coordinator picks a bundle by dag_id alone. Its other tasks prove,
// against Airflow's own supervisor, what the bundle runtime promises:
// input bindings, the conf trust rule and the outcomes a task can choose.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
)

// variant names this build; each task returns it, so a test can tell which
// bundle the coordinator ran.
var variant = "a"

// exitCode is what the process exits with after the runtime finished; the
// crash task sets it to show what a non-zero exit does to a reported state.
var exitCode = 0

type addIn struct {
	Value int `json:"value"`
	Add   int `json:"add"`
}

func main() {
	b := bundles.New()
	which := func() (string, error) { return variant, nil }
	b.Register("only_"+variant, "which", which)
	b.Register("shared", variant+"_task", which)
	// value comes from the upstream task's XCom (Airflow 3.3 drops the stub
	// call's arguments); a run's dag_run.conf may set add, nothing else.
	b.Register("bindings", "add", func(ctx context.Context, in addIn) (int, error) {
		return in.Value + in.Add, nil
	}, bundles.WithXCom("value", "up"), bundles.WithDefaults(map[string]any{"add": 1}), bundles.AllowConf("add"))
	b.Register("bindings", "fail", func() error { return fmt.Errorf("bundle %s fails on purpose", variant) })
	// Succeeds (SucceedTask is sent), then the process exits 3.
	b.Register("bindings", "succeed_then_crash", func() error { exitCode = 3; return nil })
	code := bundles.RunMain(context.Background(), b, os.Args[1:], os.Stdout, os.Stderr)
	if code == bundles.ExitOK {
		code = exitCode
	}
	os.Exit(code)
}
