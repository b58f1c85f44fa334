package bundles

import (
	"fmt"
	"strings"
	"sync"
)

// taskRef names one registered task.
type taskRef struct {
	DagID  string
	TaskID string
}

// Bundle is a registry of (dag_id, task_id) -> Go function.
type Bundle struct {
	mu    sync.RWMutex
	order []taskRef
	tasks map[taskRef]*task
}

// New returns an empty bundle.
func New() *Bundle {
	return &Bundle{tasks: map[taskRef]*task{}}
}

// validID is Airflow's rule for dag and task ids: 1-250 letters, digits,
// '_', '-' or '.'. A loop rather than a regexp keeps start-up cheap: the
// binary starts once per task instance.
func validID(s string) bool {
	if len(s) == 0 || len(s) > 250 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// Add registers fn as the implementation of (dagID, taskID). It checks the
// ids, fn's signature (see "Task functions" in the package documentation),
// the options and the defaults, and refuses a duplicate.
func (b *Bundle) Add(dagID, taskID string, fn any, opts ...TaskOption) error {
	for _, id := range []struct{ what, v string }{{"dag_id", dagID}, {"task_id", taskID}} {
		if !validID(id.v) {
			return fmt.Errorf("invalid %s %q: use 1-250 letters, digits, '_', '-' or '.'", id.what, id.v)
		}
	}
	var o taskOptions
	for _, opt := range opts {
		opt(&o)
	}
	t, err := newTask(fn, o)
	if err != nil {
		return fmt.Errorf("task %s.%s: %w", dagID, taskID, err)
	}
	ref := taskRef{DagID: dagID, TaskID: taskID}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, dup := b.tasks[ref]; dup {
		return fmt.Errorf("task %s.%s is already registered; each (dag_id, task_id) may have one function", dagID, taskID)
	}
	b.tasks[ref] = t
	b.order = append(b.order, ref)
	return nil
}

// Register is Add for code that registers at start-up, where a bad
// registration is a programming error: it panics instead of returning it.
func (b *Bundle) Register(dagID, taskID string, fn any, opts ...TaskOption) *Bundle {
	if err := b.Add(dagID, taskID, fn, opts...); err != nil {
		panic("bundles: " + err.Error())
	}
	return b
}

// feedsMapping reports whether a mapped task expands over taskID's return
// value: a task of the same Dag in this bundle binds it with
// WithExpandXCom, or the task says so (WithMappedDownstream).
func (b *Bundle) feedsMapping(dagID, taskID string, t *task) bool {
	if t.mappedDownstream {
		return true
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	for ref, other := range b.tasks {
		if ref.DagID != dagID {
			continue
		}
		for _, src := range other.bound {
			if src.expand && src.xcomTask == taskID {
				return true
			}
		}
	}
	return false
}

// refs lists the registered tasks in registration order.
func (b *Bundle) refs() []taskRef {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return append([]taskRef(nil), b.order...)
}

func (b *Bundle) lookup(dagID, taskID string) *task {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.tasks[taskRef{DagID: dagID, TaskID: taskID}]
}

// foldName matches input names case- and underscore-insensitively, so
// "conn_id", "ConnID" and "connId" are one name.
func foldName(s string) string {
	return strings.ToLower(strings.ReplaceAll(s, "_", ""))
}
