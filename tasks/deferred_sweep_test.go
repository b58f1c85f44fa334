package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/fakemodal"
)

// A deferred task that never resumes (its trigger timed out, or it was
// marked failed or cleared while deferred) leaves its sandbox, with the
// detached command running in it, to the backend's lifetime and the
// maintenance sweep: on the fake Modal, the sweep keeps a deferred
// conversion's sandbox while its run goes on, destroys it once the run has
// ended, and treats it as expired past its lifetime; the lifetime's end on
// the server takes the command with it, and a resume that comes after
// either fails for good.
func TestDeferredSandboxThatNeverResumesIsReclaimed(t *testing.T) {
	fake := fakemodal.Start(t, fakemodal.Options{})
	fake.SetEnv(t)
	e := newEnv(t)
	e.deps.Backends = nil // the registered backends: the real Modal driver on the fake
	af := &runStateAirflow{fakeAirflow: e.af, states: map[string]string{}}
	e.deps.Airflow = af
	e.deps.Defer = func(_ time.Duration, state any) error {
		data, err := json.Marshal(state)
		if err != nil {
			t.Fatal(err)
		}
		return &deferredErr{string(data)}
	}
	ctx := context.Background()
	in := decodeInput[ConvertInput](t, `{"backend": "modal", "deferrable": true, "poll_interval": "2s", "command": "echo started; sleep 600", "exports": {"out.txt": "s3://out/never.txt"}}`)
	// deferredIn runs the conversion's first run in runID and returns its
	// deps with the state it deferred with, and its sandbox.
	deferredIn := func(runID string) (Deps, string) {
		t.Helper()
		d := e.deps
		d.Run.RunID = runID
		_, err := Convert(ctx, d, in)
		var de *deferredErr
		if !errors.As(err, &de) {
			t.Fatalf("the conversion in %s did not defer: %v", runID, err)
		}
		var st deferredState
		if err := json.Unmarshal([]byte(de.state), &st); err != nil {
			t.Fatal(err)
		}
		d.Resumed = de.state
		af.states[d.Run.DagID+"/"+runID] = "running"
		return d, st.SandboxID
	}
	endedRun, endedSB := deferredIn("manual__ended")
	expiringRun, expiringSB := deferredIn("manual__expiring")
	_, longSB := deferredIn("manual__long")

	// While the runs go on, the sweep keeps all three, and their commands
	// run on: a resume polls one and defers again.
	sweep := func(now time.Time) SweepResult {
		t.Helper()
		res, err := sweepAt(ctx, e.deps, SweepInput{BackendOptions: BackendOptions{Backend: "modal"}}, now)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := sweep(time.Now()); len(res.Found) != 0 || res.Kept != 3 {
		t.Fatalf("while the runs go on the sweep found %+v and kept %d, want none and 3", res.Found, res.Kept)
	}
	var de *deferredErr
	if _, err := Convert(ctx, endedRun, in); !errors.As(err, &de) || !strings.Contains(de.state, `"detached"`) {
		t.Fatalf("a resume while the command runs did not defer again: %v", err)
	}

	// The first run ends (its deferred task marked failed): the sweep
	// destroys that sandbox only.
	af.states["dag_a/manual__ended"] = "failed"
	if res := sweep(time.Now()); !slices.Equal(res.Destroyed, []string{endedSB}) || res.Found[0].Reason != ReasonRunEnded {
		t.Fatalf("after the run ended the sweep destroyed %v (%+v), want %s for its run's end", res.Destroyed, res.Found, endedSB)
	}
	if _, err := Convert(ctx, endedRun, in); !sandbox.IsFinal(err) || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("a resume after the sweep: %v", err)
	}

	// The second reaches its lifetime on the server, which ends the
	// command with it; a late resume fails for good.
	if err := fake.ExpireSandbox(expiringSB); err != nil {
		t.Fatal(err)
	}
	if _, err := Convert(ctx, expiringRun, in); !sandbox.IsFinal(err) || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("a resume after the sandbox's lifetime: %v", err)
	}

	// The third's run still goes on, but past its lifetime (1h by
	// default) the sweep takes it as expired.
	if res := sweep(time.Now().Add(2 * time.Hour)); !slices.Equal(res.Destroyed, []string{longSB}) || res.Found[0].Reason != ReasonExpired {
		t.Fatalf("past its lifetime the sweep destroyed %v (%+v), want %s as expired", res.Destroyed, res.Found, longSB)
	}
	if live := fake.Sandboxes(); len(live) != 0 {
		t.Fatalf("%d sandbox(es) left: %+v", len(live), live)
	}
}
