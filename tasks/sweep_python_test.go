package tasks

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	_ "github.com/airflow-sandbox/airflow-go-worker/sandbox/modal" // registers the real Modal backend
	"github.com/airflow-sandbox/airflow-go-worker/testing/fakemodal"
	"github.com/airflow-sandbox/airflow-go-worker/testing/pyenv"
)

type pySandbox struct {
	Handle string
	Tags   map[string]string
}

// pythonCreate provisions sandboxes with the real common.ai provider
// (ModalSandboxBackend.create, as its example provision task does), one per
// spec ({"owner", "timeout", "tags"}), in one Python process.
func pythonCreate(t *testing.T, s *fakemodal.Server, specs ...map[string]any) []pySandbox {
	t.Helper()
	raw, _ := json.Marshal(specs)
	var out struct{ Sandboxes []pySandbox }
	pyenv.RunJSON(t, s.Env(), &out, "handoff/agent.py", "create", "--specs", string(raw))
	if len(out.Sandboxes) != len(specs) {
		t.Fatalf("agent.py create made %d sandboxes for %d specs", len(out.Sandboxes), len(specs))
	}
	return out.Sandboxes
}

// The other direction of a handoff: sandboxes the Python provider made
// (its tags, its airflow-sandbox-<hex> names) are found by sweep on Modal
// and destroyed once their owner's run is over or they have expired; one
// still in use, and one nobody in Airflow made, stay.
func TestSweepRemovesPythonProviderSandboxes(t *testing.T) {
	s := fakemodal.Start(t, fakemodal.Options{})
	s.SetEnv(t)
	e := newEnv(t)
	e.deps.Backends = nil // the registered backends: the real Modal driver, with the environment's credentials

	made := pythonCreate(t, s,
		map[string]any{"owner": "py_dag/manual__over"},
		map[string]any{"owner": "py_dag/manual__running"},
		map[string]any{"owner": "py_dag/manual__running", "timeout": 120},
		map[string]any{}, // a toolset's own sandbox: no owner
		// An author's own tags ride along and change nothing.
		map[string]any{"owner": "py_dag/manual__over", "tags": map[string]string{"team": "analytics"}},
	)
	finished, live, shortLived, ownerless, tagged := made[0].Handle, made[1].Handle, made[2].Handle, made[3].Handle, made[4].Handle
	if tags := made[0].Tags; tags["airflow_owner"] != "py_dag/manual__over" || !pythonSandboxName(tags["airflow_sandbox"]) || tags["airflow_created_by"] != "" {
		t.Fatalf("the provider stamped %v", tags)
	}
	// Made with Modal's client directly, in the same app, not by Airflow:
	// never swept, whatever its age or owner.
	var stranger struct {
		ObjectID string `json:"object_id"`
	}
	pyenv.RunJSON(t, s.Env(), &stranger, "handoff/modal_client.py", "create", "airflow-sandbox", "someone-elses-sandbox")

	ctx := context.Background()
	// Three minutes on: the 120 s sandbox has expired by its tag.
	res, err := sweepAt(ctx, e.deps, SweepInput{BackendOptions: BackendOptions{Backend: "modal"}, FinishedRuns: []string{"py_dag/manual__over"}}, time.Now().Add(3*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range res.Found {
		got[f.ID] = f.Reason + " by " + f.Creator
	}
	want := map[string]string{
		finished:   "run finished by " + CreatorPythonProvider,
		shortLived: "expired by " + CreatorPythonProvider,
		tagged:     "run finished by " + CreatorPythonProvider,
	}
	if len(got) != len(want) {
		t.Fatalf("sweep found %v, want %v", got, want)
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("sweep: %s %q, want %q", id, got[id], w)
		}
	}
	var alive []string
	for _, sb := range s.Sandboxes() {
		alive = append(alive, sb.ID)
	}
	slices.Sort(alive)
	wantAlive := []string{live, ownerless, stranger.ObjectID}
	slices.Sort(wantAlive)
	if !slices.Equal(alive, wantAlive) || res.Kept != 2 {
		t.Fatalf("alive after sweep %v (kept %d), want %v", alive, res.Kept, wantAlive)
	}
}
