package bundles

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// Airflow applies some of what a Dag author writes on a task inside its
// Python task runner, which a Go task replaces, and hands an executable none
// of it (the startup details carry no task attributes). The Go side
// declares these attributes instead; the runtime applies them as Airflow's
// task runner does, and `check` compares each with the stub's, so the two
// cannot drift apart unnoticed.

// attributes are the stub attributes a task declares (see above).
type attributes struct {
	executionTimeout time.Duration
	multipleOutputs  bool
	// branch lists the task's direct downstream task ids when it is a
	// branch; branchJoins maps one of them to those it is also downstream of.
	branch      []string
	branchJoins map[string][]string
}

func (a *attributes) check(o taskOptions, returnsT bool) error {
	if o.executionTimeout < 0 {
		return fmt.Errorf("execution timeout %s is negative; give a positive duration, or none", o.executionTimeout)
	}
	if (o.multipleOutputs || len(o.branch) > 0) && !returnsT {
		what := "multiple outputs"
		if len(o.branch) > 0 {
			what = "a branch"
		}
		return fmt.Errorf("%s needs a function that returns a value, (T, error), and this one returns only error", what)
	}
	if len(o.branchJoins) > 0 && len(o.branch) == 0 {
		return errors.New("a branch join needs a branch: declare the downstream tasks with WithBranch (bundle config branch:)")
	}
	seen := map[string]bool{}
	for _, id := range o.branch {
		switch {
		case !validID(id):
			return fmt.Errorf("branch: %q is not a task id (1-250 letters, digits, '_', '-' or '.')", id)
		case seen[id]:
			return fmt.Errorf("branch: %q is listed twice", id)
		}
		seen[id] = true
	}
	for join, after := range o.branchJoins {
		if !seen[join] {
			return fmt.Errorf("branch join %q is not one of the branch's downstream tasks [%s]; list it under branch too", join, strings.Join(o.branch, ", "))
		}
		for _, a := range after {
			if !seen[a] || a == join {
				return fmt.Errorf("branch join %q: %q must be another of the branch's downstream tasks [%s]", join, a, strings.Join(o.branch, ", "))
			}
		}
	}
	a.executionTimeout, a.multipleOutputs = o.executionTimeout, o.multipleOutputs
	a.branch, a.branchJoins = o.branch, o.branchJoins
	return nil
}

// executionTimeoutError is the cause of a task context the task's
// execution timeout ended.
type executionTimeoutError struct{ timeout time.Duration }

func (e *executionTimeoutError) Error() string {
	return fmt.Sprintf("the task ran longer than its execution_timeout of %s and was stopped", e.timeout)
}

// timedOut turns the outcome of a task its execution timeout cancelled into
// that failure: whatever the task returned after being cancelled (its
// context's error, or even success), it ran past its limit.
func timedOut(out outcome, cause error) outcome {
	var te *executionTimeoutError
	if !errors.As(cause, &te) {
		return out
	}
	if out.err != nil && !errors.Is(out.err, context.Canceled) {
		out.err = fmt.Errorf("%w (the task then returned: %v)", te, out.err)
	} else {
		out.err = te
	}
	return out
}

// pushMultipleOutputs pushes each key of result as an XCom of its own, as
// Airflow does for multiple_outputs=True, before return_value.
func pushMultipleOutputs(ctx context.Context, cl *client, result any) error {
	v, err := toJSONValue(result)
	if err != nil {
		return fmt.Errorf("multiple outputs: the result is not JSON-encodable: %w", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return FailNoRetry(fmt.Errorf("multiple outputs: the task returned %s, and multiple_outputs needs a mapping (a map with string keys, or a struct) whose keys become XComs", jsonKindOf(v)))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys) // deterministic requests
	for _, k := range keys {
		if err := cl.SetXCom(ctx, k, m[k]); err != nil {
			return fmt.Errorf("multiple outputs: %w", err)
		}
	}
	return nil
}

// The XCom a branch leaves for Airflow's NotPreviouslySkippedDep, which
// keeps the unchosen tasks skipped when they are cleared: key and field as
// Airflow's SkipMixin writes them.
const (
	skipMixinKey      = "skipmixin_key"
	skipMixinFollowed = "followed"
)

// follower is a result that says which tasks a branch follows.
type follower interface{ FollowTasks() []string }

// chosenTasks reads the task ids a branch's result chooses.
func chosenTasks(result any, has bool) ([]string, error) {
	if !has {
		return nil, nil
	}
	switch r := result.(type) {
	case follower:
		return r.FollowTasks(), nil
	case string:
		return []string{r}, nil
	case []string:
		return r, nil
	}
	v, err := toJSONValue(result)
	if err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case nil:
		return nil, nil
	case string:
		return []string{v}, nil
	case []any:
		ids := make([]string, len(v))
		for i, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("element %d of the returned list is %s, not a task id", i, jsonKindOf(e))
			}
			ids[i] = s
		}
		return ids, nil
	}
	return nil, fmt.Errorf("a branch returns a task id (a string), a list of task ids or nothing, not %s", jsonKindOf(v))
}

// branchPlan is which of a branch's downstream tasks it follows and skips.
type branchPlan struct{ follow, skip []string }

// planBranch applies Airflow's rule: the chosen tasks are followed, and so
// is every downstream task reachable from one (a join); the rest are
// skipped.
func (a *attributes) planBranch(chosen []string) (branchPlan, error) {
	follow := map[string]bool{}
	for _, id := range chosen {
		if !slices.Contains(a.branch, id) {
			return branchPlan{}, FailNoRetry(fmt.Errorf("the branch chose %q, which is not one of its downstream tasks [%s] (bundle config branch:, Go bundles.WithBranch); return one of those ids, or declare the task there if the Dag has it downstream", id, strings.Join(a.branch, ", ")))
		}
		follow[id] = true
	}
	for join, after := range a.branchJoins {
		for _, id := range after {
			if follow[id] {
				follow[join] = true
			}
		}
	}
	var p branchPlan
	for _, id := range a.branch {
		if follow[id] {
			p.follow = append(p.follow, id)
		} else {
			p.skip = append(p.skip, id)
		}
	}
	return p, nil
}

// applyBranch records the branch's choice and has Airflow skip the tasks it
// did not choose. As in Airflow, a mapped instance skips nothing itself (the
// scheduler's NotPreviouslySkippedDep does, from the XCom), and only a
// branch that skips pushes no return_value.
func applyBranch(ctx context.Context, cl *client, a *attributes, result any, has bool, log hclog.Logger) (pushResult bool, err error) {
	chosen, err := chosenTasks(result, has)
	if err != nil {
		return false, FailNoRetry(fmt.Errorf("branch: %w", err))
	}
	p, err := a.planBranch(chosen)
	if err != nil {
		return false, err
	}
	log.Info("following branch", "follow", p.follow, "skip", p.skip)
	followed := p.follow
	if followed == nil {
		followed = []string{}
	}
	if err := cl.SetXCom(ctx, skipMixinKey, map[string]any{skipMixinFollowed: followed}); err != nil {
		return false, fmt.Errorf("branch: %w", err)
	}
	if cl.ti.MapIndex >= 0 || len(p.skip) == 0 {
		return true, nil
	}
	tasks := make([]any, len(p.skip))
	for i, id := range p.skip {
		tasks[i] = []any{id, cl.ti.MapIndex}
	}
	if _, err := cl.rpc.call(ctx, &protocol.SkipDownstreamTasks{Tasks: tasks}); err != nil {
		return false, fmt.Errorf("branch: skipping %s: %w", strings.Join(p.skip, ", "), err)
	}
	return false, nil
}
