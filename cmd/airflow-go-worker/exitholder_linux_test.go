//go:build linux && (amd64 || arm64)

package main

import (
	"errors"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"golang.org/x/sys/unix"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/selftest"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/supervisor"
	"github.com/airflow-sandbox/airflow-go-worker/internal/exitorder"
)

// A task process of the real binary ends through bundles.Exit, which
// leaves an exit holder (internal/exitorder) so that Airflow's
// supervisor sees the exit no later than the end of the output. The holder
// outlives the task process and is adopted by its nearest subreaper: this
// test, which reaps it to see that it ran and ended. An operator whose
// init does not reap orphans turns the holder off (exitorder.HolderEnv),
// and then the task process leaves nothing to adopt.
func TestBuiltBinaryExitsThroughAHolder(t *testing.T) {
	bin := buildReal(t)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	ping := func(t *testing.T, env []string) {
		s := &supervisor.Supervisor{Executable: bin, Env: env}
		res, err := s.RunTask(deadline.Context(t), supervisor.TaskRequest{DagID: selftest.DagID, TaskID: "ping"})
		if err != nil || res.State != supervisor.StateSuccess {
			t.Fatalf("ping ended %s (%v): %q", res.State, err, res.Output)
		}
	}
	t.Run("by default", func(t *testing.T) {
		ping(t, []string{})
		var ws unix.WaitStatus
		if _, err := unix.Wait4(-1, &ws, 0, nil); err != nil {
			t.Fatalf("the task process left no exit holder to adopt: %v", err)
		}
		if !ws.Exited() || ws.ExitStatus() != 0 {
			t.Fatalf("the exit holder ended with %v", ws)
		}
	})
	t.Run("turned off", func(t *testing.T) {
		ping(t, []string{exitorder.HolderEnv + "=off"})
		var ws unix.WaitStatus
		if pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil); !errors.Is(err, unix.ECHILD) {
			t.Fatalf("with %s=off the task process left a child to adopt (pid %d, %v, %v)", exitorder.HolderEnv, pid, ws, err)
		}
	})
}
