package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
)

// batch is a set of Dag runs triggered at once, their run ids sharing a
// prefix so one REST request reads them all.
type batch struct {
	name   string
	prefix string
	runs   []*dagRun
	byKey  map[string]*dagRun // dag_id/run_id
	start  time.Time
	seen   map[string]string // last state printed, per run and per task
}

// batchPart is n runs of one Dag.
type batchPart struct {
	s *scenario
	n int
}

func newBatch(name string) *batch {
	return &batch{name: name, prefix: name + "__" + time.Now().UTC().Format("20060102T150405") + "__",
		byKey: map[string]*dagRun{}, seen: map[string]string{}, start: time.Now()}
}

// trigger triggers the runs of plan, each with an empty conf, numbering
// each Dag's runs on from its earlier ones in the batch.
func (b *batch) trigger(ctx context.Context, api *apiClient, plan ...batchPart) error {
	var what []string
	for _, p := range plan {
		first := 1
		for _, r := range b.runs {
			if r.scenario == p.s {
				first++
			}
		}
		for i := first; i < first+p.n; i++ {
			r := &dagRun{scenario: p.s, runID: fmt.Sprintf("%s%02d", b.prefix, i), state: "queued"}
			if err := api.trigger(ctx, p.s.dagID, r.runID); err != nil {
				return fmt.Errorf("triggering %s run %s: %w", p.s.dagID, r.runID, err)
			}
			b.runs = append(b.runs, r)
			b.byKey[p.s.dagID+"/"+r.runID] = r
		}
		what = append(what, fmt.Sprintf("%d x %s", p.n, p.s.dagID))
	}
	info("triggered %s (run ids %s*)", strings.Join(what, ", "), b.prefix)
	return nil
}

// listAll reads every page of a REST collection (the api-server caps a
// page at [api] maximum_page_limit, 100 by default): the items under field.
func listAll[T any](ctx context.Context, api *apiClient, path, field string) ([]T, error) {
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	var all []T
	for {
		var page map[string]json.RawMessage
		if err := api.do(ctx, http.MethodGet, fmt.Sprintf("%s%slimit=100&offset=%d", path, sep, len(all)), nil, &page, ""); err != nil {
			return nil, err
		}
		var items []T
		var total int
		if err := json.Unmarshal(page[field], &items); err != nil {
			return nil, fmt.Errorf("GET %s: %s is not the list expected: %v", path, field, err)
		}
		if err := json.Unmarshal(page["total_entries"], &total); err != nil {
			return nil, fmt.Errorf("GET %s: no total_entries: %v", path, err)
		}
		all = append(all, items...)
		if len(items) == 0 || len(all) >= total {
			return all, nil
		}
	}
}

// poll reads the state of every run of the batch and of their tasks.
func (b *batch) poll(ctx context.Context, api *apiClient) error {
	type runJSON struct {
		DagID string `json:"dag_id"`
		RunID string `json:"dag_run_id"`
		State string `json:"state"`
	}
	type tiJSON struct {
		DagID     string  `json:"dag_id"`
		RunID     string  `json:"dag_run_id"`
		TaskID    string  `json:"task_id"`
		State     *string `json:"state"`
		TryNumber int     `json:"try_number"`
		Hostname  *string `json:"hostname"`
	}
	q := "run_id_prefix_pattern=" + url.QueryEscape(b.prefix)
	runs, err := listAll[runJSON](ctx, api, "/api/v2/dags/~/dagRuns?"+q, "dag_runs")
	if err != nil {
		return err
	}
	tis, err := listAll[tiJSON](ctx, api, "/api/v2/dags/~/dagRuns/~/taskInstances?"+q, "task_instances")
	if err != nil {
		return err
	}
	for _, r := range runs {
		if dr := b.byKey[r.DagID+"/"+r.RunID]; dr != nil {
			dr.state = r.State
		}
	}
	fresh := map[*dagRun]map[string]taskState{}
	for _, ti := range tis {
		dr := b.byKey[ti.DagID+"/"+ti.RunID]
		if dr == nil {
			continue
		}
		if fresh[dr] == nil {
			fresh[dr] = map[string]taskState{}
		}
		fresh[dr][ti.TaskID] = newTaskState(ti.State, ti.TryNumber, ti.Hostname)
	}
	for dr, tasks := range fresh {
		dr.tasks = tasks
	}
	return nil
}

// report prints what changed since the last report: a task that started
// (with the worker it runs on), ended or is to be retried, and each run
// that ended.
func (b *batch) report() {
	at := time.Since(b.start).Round(time.Second)
	for _, r := range b.runs {
		for _, id := range r.taskIDs() {
			ts := r.tasks[id]
			key := r.scenario.dagID + "/" + r.runID + "/" + id
			now := fmt.Sprintf("%s/%d", ts.state, ts.try)
			if b.seen[key] == now {
				continue
			}
			b.seen[key] = now
			switch ts.state {
			case "running":
				info("%6s  %s %s %s: running on %s (try %d)", at, r.scenario.dagID, r.runID, id, ts.host, ts.try)
			case "success", "failed", "up_for_retry", "upstream_failed":
				where := ""
				if ts.host != "" {
					where = " on " + ts.host
				}
				info("%6s  %s %s %s: %s%s", at, r.scenario.dagID, r.runID, id, ts.state, where)
			}
		}
		key := r.scenario.dagID + "/" + r.runID
		if r.ended() && b.seen[key] != r.state {
			b.seen[key] = r.state
			info("%6s  %s %s: run %s", at, r.scenario.dagID, r.runID, r.state)
		}
	}
}

func (r *dagRun) ended() bool { return r.state == "success" || r.state == "failed" }

// ended counts the runs that ended, and how.
func (b *batch) counts() (ended int, states map[string]int) {
	states = map[string]int{}
	for _, r := range b.runs {
		states[r.state]++
		if r.ended() {
			ended++
		}
	}
	return ended, states
}

// wait polls the batch until cond holds (nil: every run ended), printing
// progress, failing when alive reports a dead component or after timeout.
func (b *batch) wait(ctx context.Context, api *apiClient, what string, timeout time.Duration, alive func() error, cond func() (bool, string)) error {
	if cond == nil {
		cond = func() (bool, string) {
			ended, states := b.counts()
			return ended == len(b.runs), fmt.Sprintf("%d of %d runs ended (%s)", ended, len(b.runs), formatCounts(states))
		}
	}
	nextNote := time.Now().Add(30 * time.Second)
	err := poll(ctx, timeout, 3*time.Second, what, alive, func() (bool, string, error) {
		if err := b.poll(ctx, api); err != nil {
			if ctx.Err() != nil {
				return false, "", ctx.Err()
			}
			return false, "reading the runs failed: " + err.Error(), nil
		}
		b.report()
		done, why := cond()
		if !done && time.Now().After(nextNote) {
			info("%6s  waiting for %s: %s", time.Since(b.start).Round(time.Second), what, why)
			nextNote = time.Now().Add(30 * time.Second)
		}
		return done, why, nil
	})
	return err
}

func formatCounts(m map[string]int) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%d %s", v, k))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
