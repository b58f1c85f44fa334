package bundles

import (
	"maps"
	"slices"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/taskinfo"
)

// The bundle's own tools (check, describe, the parse answer) read a Bundle
// through taskinfo.Describe, not through methods a task author would see.
func init() { taskinfo.Describe = func(b any) []taskinfo.Task { return b.(*Bundle).describe() } }

// describe lists the registered tasks as the tools see them.
func (b *Bundle) describe() []taskinfo.Task {
	b.mu.RLock()
	defer b.mu.RUnlock()
	// The tasks some mapped task expands over, found in one pass: asking
	// feedsMapping per task is quadratic in a config of many Dags.
	fed := map[taskRef]bool{}
	for ref, t := range b.tasks {
		for _, src := range t.bound {
			if src.expand && src.xcomTask != "" {
				fed[taskRef{DagID: ref.DagID, TaskID: src.xcomTask}] = true
			}
		}
	}
	out := make([]taskinfo.Task, 0, len(b.order))
	for _, ref := range b.order {
		t := b.tasks[ref]
		out = append(out, t.describe(ref, t.mappedDownstream || fed[ref]))
	}
	return out
}

func (t *task) describe(ref taskRef, feeds bool) taskinfo.Task {
	d := taskinfo.Task{
		DagID: ref.DagID, TaskID: ref.TaskID,
		Defaults:         maps.Clone(t.defaults),
		Outlets:          slices.Clone(t.outlets),
		Aliases:          slices.Clone(t.aliases),
		FeedsMapping:     feeds,
		ReturnsValue:     t.returnsT,
		ExecutionTimeout: t.executionTimeout,
		MultipleOutputs:  t.multipleOutputs,
		Branch:           slices.Clone(t.branch),
		BranchJoins:      maps.Clone(t.branchJoins),
	}
	for _, f := range t.fields {
		d.Inputs = append(d.Inputs, f.name)
	}
	for i, src := range t.bound {
		name := t.fields[i].name
		switch {
		case src.expand:
			if d.Expansions == nil {
				d.Expansions = map[string]taskinfo.Expansion{}
			}
			d.Expansions[name] = taskinfo.Expansion{XComTask: src.xcomTask, Items: src.items, Literal: src.hasItems}
		case src.hasTemplate:
			if d.Templates == nil {
				d.Templates = map[string]string{}
			}
			d.Templates[name] = src.template
		case src.param != "":
			if d.ParamInputs == nil {
				d.ParamInputs = map[string]taskinfo.Param{}
			}
			d.ParamInputs[name] = taskinfo.Param{Name: src.param}
		}
		if src.xcomTask != "" {
			if d.XComInputs == nil {
				d.XComInputs = map[string]taskinfo.XComRef{}
			}
			d.XComInputs[name] = taskinfo.XComRef{Task: src.xcomTask, Key: src.xcomKey}
		}
	}
	return d
}
