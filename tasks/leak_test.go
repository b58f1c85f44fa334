package tasks

import (
	"context"
	"slices"
	"testing"
	"time"
)

// stuckAirflow never answers SetXCom: the worker died between creating the
// sandbox and pushing its id (kill -9, a lost node), so no later task of the
// run knows the sandbox.
type stuckAirflow struct {
	*fakeAirflow
	reached chan struct{}
	release chan struct{}
}

func (s *stuckAirflow) SetXCom(ctx context.Context, key string, value any) error {
	close(s.reached)
	<-s.release
	return context.Canceled
}

// Issue 10, hole 10: a sandbox leaked before its id reached XCom is found by
// its owner tag (every driver lists by tags; the conformance suite checks
// it) and swept once its run is over.
func TestSweepFindsASandboxLeakedBeforeItsIDReachedXCom(t *testing.T) {
	e := newEnv(t)
	stuck := &stuckAirflow{fakeAirflow: e.af, reached: make(chan struct{}), release: make(chan struct{})}
	deps := e.deps
	deps.Airflow = stuck
	done := make(chan error, 1)
	go func() {
		_, err := Provision(context.Background(), deps, ProvisionInput{})
		done <- err
	}()
	<-stuck.reached
	leaked := e.drv.alive()
	if len(leaked) != 1 {
		t.Fatalf("want the one sandbox provision made, alive %v", leaked)
	}
	if len(e.af.xcoms) != 0 {
		t.Fatalf("the id reached XCom after all: %v", e.af.xcoms)
	}

	// Another process: only the owner of the run that is over is known.
	sweeper := newEnv(t)
	sweeper.drv, sweeper.deps.Backends = e.drv, e.drv.opener(nil)
	res, err := sweepAt(context.Background(), sweeper.deps, SweepInput{FinishedRuns: []string{e.deps.Run.Owner()}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Destroyed, leaked) || len(e.drv.alive()) != 0 || res.Found[0].Reason != "run finished" {
		t.Fatalf("sweep by owner: %+v, alive %v", res, e.drv.alive())
	}
	close(stuck.release)
	<-done
}
