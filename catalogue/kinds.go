package catalogue

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/tasks"
)

// taskKind is one entry of the catalogue as the config exposes it.
type taskKind struct {
	fn    any          // the function registered with bundles
	input reflect.Type // its input struct, to check defaults at load time
}

// Adapt turns a function written like the catalogue's own tasks,
// func(ctx, tasks.Deps, In) (Out, error), into a function bundles can
// register: the runtime injects the task instance, the Airflow client and
// the task logger, which become its Deps; In binds from arg_bindings,
// inputs, dag_run.conf and defaults like any input struct. Go users' tasks
// get sandboxes and storage through the same Deps (tasks.OpenBackend,
// tasks.OpenObject) as the catalogue's.
func Adapt[In, Out any](fn func(context.Context, tasks.Deps, In) (Out, error)) any {
	return adapt(fn).fn
}

func adapt[In, Out any](fn func(context.Context, tasks.Deps, In) (Out, error)) taskKind {
	return taskKind{
		fn: func(ctx context.Context, ti bundles.TaskInstance, af tasks.Airflow, log hclog.Logger, o *bundles.Outlets, in In) (Out, error) {
			d := DepsFor(ti, af, log)
			// Closing releases the stores' clients; the task's outcome is
			// already decided by then.
			defer func() { _ = d.Storage.Close() }()
			var exported []tasks.ExportedFile
			d.OnExported = func(files []tasks.ExportedFile) { exported = append(exported, files...) }
			out, err := fn(ctx, d, in)
			if err == nil && len(exported) > 0 && len(o.Assets()) > 0 {
				err = describeExports(o, exported)
			}
			return out, err
		},
		input: reflect.TypeFor[In](),
	}
}

// describeExports puts what the task exported in the extra of its asset
// outlets' events, so a Dag scheduled on the asset learns what was written
// ({asset_event: ..., field: extra.url}): url (when one file was
// exported), urls, bytes (in all) and files ({url, bytes, sha256 when the
// task's sha256 input asked for it}). These keys win over the same keys
// a Go task set itself.
func describeExports(o *bundles.Outlets, files []tasks.ExportedFile) error {
	urls := make([]string, len(files))
	var total int64
	for i, f := range files {
		urls[i] = f.URL
		total += f.Bytes
	}
	extra := map[string]any{"urls": urls, "bytes": total, "files": files}
	if len(files) == 1 {
		extra["url"] = files[0].URL
		if files[0].SHA256 != "" {
			extra["sha256"] = files[0].SHA256
		}
	}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		if err := o.SetExtra(k, extra[k]); err != nil {
			return fmt.Errorf("describing the exports in the asset outlet events: %w", err)
		}
	}
	return nil
}

// DepsFor is the tasks.Deps of a running task instance, with the storage
// handle every transfer of the task shares (tasks.NewStorage); the caller
// closes it when the task ends.
func DepsFor(ti bundles.TaskInstance, af tasks.Airflow, log hclog.Logger) tasks.Deps {
	return tasks.Deps{
		Airflow: af,
		Run:     tasks.Run{DagID: ti.DagID, RunID: ti.RunID, TaskID: ti.TaskID, MapIndex: ti.MapIndex},
		Logger:  log,
		Storage: tasks.NewStorage(nil),
		Defer:   bundles.Defer,
		Resumed: ti.Resumed,
	}
}

// taskKinds is the catalogue by kind name.
var taskKinds = map[string]taskKind{
	"provision": adapt(tasks.Provision),
	"run":       adapt(tasks.RunCommands),
	"export":    adapt(tasks.Export),
	"collect":   adapt(tasks.Collect),
	"destroy":   adapt(tasks.Destroy),
	"convert":   adapt(tasks.Convert),
	"list":      adapt(tasks.List),
	"sweep":     adapt(tasks.Sweep),
}

// Kinds lists the catalogue's task kinds, sorted.
func Kinds() []string { return slices.Sorted(maps.Keys(taskKinds)) }

// kindFor looks kind up, saying what the catalogue has when it does not.
func kindFor(kind string) (taskKind, error) {
	k, ok := taskKinds[kind]
	switch {
	case ok:
		return k, nil
	case kind == "":
		return k, fmt.Errorf("kind is missing; set it to one of %s", strings.Join(Kinds(), ", "))
	}
	return k, fmt.Errorf("kind %q is not one of %s", kind, strings.Join(Kinds(), ", "))
}

// Add registers catalogue kind as (dagID, taskID) in b, with the same
// checks a bundle config's task gets: defaults decoded strictly and checked
// against the backends the bundle links.
func Add(b *bundles.Bundle, dagID, taskID, kind string, defaults map[string]any, opts ...bundles.TaskOption) error {
	k, err := kindFor(kind)
	if err != nil {
		return err
	}
	inDefaults, err := k.add(b, dagID, taskID, defaults, nil, opts...)
	if inDefaults {
		return fmt.Errorf("task %s.%s defaults: %w", dagID, taskID, err)
	}
	return err
}

// add registers k as (dagID, taskID) with defaults, then opts, and checks
// each default against k's input and the backends the bundle links (what
// b.Add cannot know); bound names the inputs bound at run time, whose
// defaults never apply. inDefaults says the error is a default's.
func (k taskKind) add(b *bundles.Bundle, dagID, taskID string, defaults map[string]any, bound []string, opts ...bundles.TaskOption) (inDefaults bool, err error) {
	if len(defaults) > 0 {
		opts = append([]bundles.TaskOption{bundles.WithDefaults(defaults)}, opts...)
	}
	if err := b.Add(dagID, taskID, k.fn, opts...); err != nil {
		return false, err
	}
	if err := checkDefaults(k.input, defaults, bound); err != nil {
		return true, err
	}
	return false, nil
}
