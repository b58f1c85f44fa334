package tasks

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// makeOwned creates a sandbox of this bundle's, owned by owner ("" for
// none), that expires after life, and returns its id.
func makeOwned(t *testing.T, e *env, owner string, life time.Duration, now time.Time) string {
	t.Helper()
	spec := sandbox.Spec{Lifetime: life}.WithDefaults()
	name := sandbox.NewName()
	spec.Tags = sandbox.OwnershipTags(name, spec, now)
	// Set after validation: the Python provider checks no owner's form.
	if owner != "" {
		spec.Tags[sandbox.TagOwner] = owner
	}
	info, err := e.drv.Create(context.Background(), name, spec)
	if err != nil {
		t.Fatal(err)
	}
	return info.ID
}

// Sweep learns from Airflow which owner runs have ended, with no run
// named: sandboxes of runs that succeeded or failed go, those of runs that
// are queued or running stay, and so do those whose run's state cannot be
// learnt (unknown to this Airflow, an error, an owner that names no run).
func TestSweepAsksAirflowWhichRunsEnded(t *testing.T) {
	e := newEnv(t)
	af := &runStateAirflow{fakeAirflow: e.af,
		states: map[string]string{"d/ok": "success", "d/bad": "failed", "d/live": "running", "d/waiting": "queued"},
		errs:   map[string]error{"d/broken": errors.New("api-server unreachable")}}
	e.deps.Airflow = af
	now := time.Now()
	ids := map[string]string{}
	for _, owner := range []string{"d/ok", "d/bad", "d/live", "d/waiting", "d/gone", "d/broken", "no-run-here", ""} {
		ids[owner] = makeOwned(t, e, owner, time.Hour, now)
	}
	second := makeOwned(t, e, "d/ok", time.Hour, now) // asked about once, not twice
	expiredLive := makeOwned(t, e, "d/live", time.Minute, now)

	res, err := sweepAt(context.Background(), e.deps, SweepInput{}, now.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	why := map[string]string{}
	for _, f := range res.Found {
		why[f.ID] = f.Reason + "/" + f.RunState
	}
	want := map[string]string{ids["d/ok"]: "run ended/success", second: "run ended/success", ids["d/bad"]: "run ended/failed", expiredLive: "expired/"}
	if len(why) != len(want) || res.Kept != 6 {
		t.Fatalf("found %v (want %v), kept %d (want 6)", why, want, res.Kept)
	}
	for id, w := range want {
		if why[id] != w {
			t.Errorf("%s: reason %q, want %q", id, why[id], w)
		}
	}
	alive := e.drv.alive()
	for owner, id := range ids {
		gone := !slices.Contains(alive, id)
		if gone != (owner == "d/ok" || owner == "d/bad") {
			t.Errorf("sandbox of %q: gone=%v", owner, gone)
		}
	}
	slices.Sort(af.asked)
	if got := strings.Join(af.asked, ","); got != "d/bad,d/broken,d/gone,d/live,d/ok,d/waiting" {
		t.Errorf("asked about %s; want each owner run once (none for the expired one, the ownerless one or an owner that names no run)", got)
	}
	log := e.log.String()
	for _, line := range []string{`destroyed: id=` + ids["d/ok"], `reason="run ended" run_state=success`, `reason=expired`,
		`could not learn the state of the owner run`, `owner=d/broken`, `api-server unreachable`, `names no Dag run`} {
		if !strings.Contains(log, line) {
			t.Errorf("the log lacks %q:\n%s", line, log)
		}
	}
}

// Outside Airflow (the sweep command) nothing answers for runs: only
// expired sandboxes and runs finished_runs names go, and the log says why.
func TestSweepWithoutRunStatesKeepsUnnamedRuns(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	named := makeOwned(t, e, "d/named", time.Hour, now)
	other := makeOwned(t, e, "d/other", time.Hour, now)
	res, err := sweepAt(context.Background(), e.deps, SweepInput{FinishedRuns: []string{"d/named"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Destroyed, []string{named}) || res.Kept != 1 || !slices.Contains(e.drv.alive(), other) {
		t.Fatalf("destroyed %v kept %d alive %v", res.Destroyed, res.Kept, e.drv.alive())
	}
	if !strings.Contains(e.log.String(), "cannot be learnt here") {
		t.Fatalf("the log does not say run states are unknown here:\n%s", e.log.String())
	}
}

// The sweep's log names each run whose sandboxes it kept because Airflow
// says the run has not ended, with its state and its sandbox count, and
// says what keeps a run unended after a worker died (a task stuck queued)
// and what to do; runs that ended, and runs whose state it could not
// learn, are not named there.
func TestSweepNamesTheRunsThatHaveNotEnded(t *testing.T) {
	e := newEnv(t)
	e.deps.Airflow = &runStateAirflow{fakeAirflow: e.af,
		states: map[string]string{"d/ok": "success", "d/live": "running", "d/waiting": "queued"},
		errs:   map[string]error{"d/broken": errors.New("api-server unreachable")}}
	now := time.Now()
	for _, owner := range []string{"d/ok", "d/live", "d/live", "d/waiting", "d/broken"} {
		makeOwned(t, e, owner, time.Hour, now)
	}
	res, err := sweepAt(context.Background(), e.deps, SweepInput{}, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Destroyed) != 1 || res.Kept != 4 {
		t.Fatalf("destroyed %v, kept %d: want d/ok's one destroyed and 4 kept", res.Destroyed, res.Kept)
	}
	var named []string
	for _, line := range strings.Split(e.log.String(), "\n") {
		if strings.Contains(line, "kept: the sandboxes of a run that has not ended") {
			named = append(named, line[strings.Index(line, "owner="):])
		}
	}
	want := []string{"owner=d/live run_state=running sandboxes=2", "owner=d/waiting run_state=queued sandboxes=1"}
	if len(named) != len(want) || !strings.HasPrefix(named[0], want[0]) || !strings.HasPrefix(named[1], want[1]) {
		t.Fatalf("the runs named as not ended are\n%q, want\n%q; log:\n%s", named, want, e.log.String())
	}
	for _, s := range []string{"task stuck queued", "[scheduler] task_queued_timeout (600 s by default)", "clear the task or mark it failed", "runs=2"} {
		if !strings.Contains(e.log.String(), s) {
			t.Errorf("the log lacks %q:\n%s", s, e.log.String())
		}
	}
}

// With every owner run ended, no run is named and no hint is logged.
func TestSweepNamesNoRunWhenAllEnded(t *testing.T) {
	e := newEnv(t)
	e.deps.Airflow = &runStateAirflow{fakeAirflow: e.af, states: map[string]string{"d/ok": "success"}}
	now := time.Now()
	makeOwned(t, e, "d/ok", time.Hour, now)
	res, err := sweepAt(context.Background(), e.deps, SweepInput{}, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Destroyed) != 1 {
		t.Fatalf("destroyed %v, want the ended run's sandbox", res.Destroyed)
	}
	if log := e.log.String(); strings.Contains(log, "has not ended") || strings.Contains(log, "task_queued_timeout") {
		t.Fatalf("the log names unended runs although every run ended:\n%s", log)
	}
}

// A run's line says how long ago its oldest sandbox was made, when the
// backend reports creation times.
func TestUnendedRunsReportTheOldestSandbox(t *testing.T) {
	var buf strings.Builder
	log := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info})
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	u := unendedRuns{}
	u.add("d/r", "running", now.Add(-3*time.Minute))
	u.add("d/r", "running", now.Add(-14*time.Minute))
	u.add("d/r", "running", time.Time{})
	u.report(log, now)
	if want := "owner=d/r run_state=running sandboxes=3 oldest_made=\"14m0s ago\""; !strings.Contains(buf.String(), want) {
		t.Fatalf("the log lacks %q:\n%s", want, buf.String())
	}
}
