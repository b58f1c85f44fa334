// Command testbundle is a plain Go bundle for the real-task-SDK tests
// (e2e/realsdk). Built twice with -ldflags "-X main.variant=a" (and b), it
// gives two bundles that each own a Dag and share one, to show how Airflow
// 3.3's coordinator picks a bundle by dag_id alone. Its other tasks prove,
// against Airflow's own supervisor, what the bundle runtime promises:
// input bindings, the conf trust rule and the outcomes a task can choose.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/cleanup"
	"github.com/airflow-sandbox/airflow-go-worker/internal/exitorder"
)

// variant names this build; each task returns it, so a test can tell which
// bundle the coordinator ran.
var variant = "a"

// exitCode is what the process exits with after the runtime finished; the
// crash task sets it to show what a non-zero exit does to a reported state.
var exitCode = 0

type runStatesIn struct {
	Runs []string `json:"runs"`
}

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
	// Outcomes a task chooses.
	b.Register("outcomes", "skip", func() error { return bundles.Skip("bundle %s has nothing to do", variant) })
	b.Register("outcomes", "fail_no_retry", func() error { return bundles.FailNoRetry(errors.New("the input can never work")) })
	// Waits to be cancelled, then cleans up for longer than the cancel
	// grace allows (cut_cleanup) or briefly (quick_cleanup).
	for task, need := range map[string]time.Duration{"cut_cleanup": time.Hour, "quick_cleanup": 0} {
		b.Register("outcomes", task, func(ctx context.Context, log hclog.Logger) error {
			log.Info("waiting to be cancelled")
			<-ctx.Done()
			cctx, cancel := cleanup.Context(ctx, time.Hour)
			defer cancel()
			select {
			case <-time.After(need):
				log.Info("cleanup done")
			case <-cctx.Done():
				log.Warn("cleanup stopped", "cause", context.Cause(cctx).Error())
			}
			return ctx.Err()
		})
	}
	// What GetDagRunState answers for each run ("<dag_id>/<run_id>") in
	// conf: its state, "not found", or the error.
	b.Register("run_states", "ask", func(ctx context.Context, c bundles.Client, in runStatesIn) (map[string]string, error) {
		out := map[string]string{}
		for _, r := range in.Runs {
			dag, run, _ := strings.Cut(r, "/")
			st, err := c.GetDagRunState(ctx, dag, run)
			switch {
			case errors.Is(err, bundles.ErrDagRunNotFound):
				st = "not found"
			case err != nil:
				st = "error: " + err.Error()
			}
			out[r] = st
		}
		return out, nil
	}, bundles.AllowConf("runs"))
	registerAttributes(b)
	// Defers twice (a second between polls, the count in its state), then
	// returns what it carried; its timeout gives the DeferTask a
	// trigger_timeout.
	b.Register("deferral", "poll", func(ti bundles.TaskInstance) (string, error) {
		var polls int
		if ti.Resumed != "" {
			if err := json.Unmarshal([]byte(ti.Resumed), &polls); err != nil {
				return "", err
			}
		}
		if polls < 2 {
			return "", bundles.Defer(time.Second, polls+1)
		}
		return fmt.Sprintf("polled %d times, deferred %d times", polls, ti.Deferrals), nil
	}, bundles.WithExecutionTimeout(time.Hour))
	// Succeeds (SucceedTask is sent), then the process exits 3.
	b.Register("bindings", "succeed_then_crash", func() error { exitCode = 3; return nil })
	code := b.Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	if code == exitorder.OK {
		code = exitCode
	}
	exitorder.Exit(code)
}

// registerAttributes adds the tasks that apply stub attributes Airflow's
// Python task runner would (issue 37): a branch, multiple outputs, an
// execution timeout, and a read of an asset's events.
func registerAttributes(b *bundles.Bundle) {
	b.Register("attributes", "branch", func() (string, error) { return "right", nil }, bundles.WithBranch("left", "right"))
	b.Register("attributes", "outputs", func() (map[string]int, error) { return map[string]int{"rows": 3, "files": 1}, nil },
		bundles.WithMultipleOutputs())
	b.Register("attributes", "timeout", func(ctx context.Context, log hclog.Logger) error {
		log.Info("working until stopped")
		<-ctx.Done()
		return ctx.Err()
	}, bundles.WithExecutionTimeout(300*time.Millisecond))
	b.Register("attributes", "inlets", func(ctx context.Context, c bundles.Client) (any, error) {
		events, err := c.GetAssetEvents(ctx, bundles.Asset{URI: "s3://b/orders"}, 1)
		if err != nil || len(events) == 0 {
			return nil, err
		}
		return events[0].Extra, nil
	})
}
