package tasks

import (
	"context"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/registry"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// Airflow is what the tasks ask of Airflow while they run. bundles.Client
// satisfies it. GetConnection returns an error wrapping connections.ErrNotFound
// when the connection does not exist.
type Airflow interface {
	GetConnection(ctx context.Context, connID string) (connections.Connection, error)
	GetVariable(ctx context.Context, key string) (string, error)
	SetXCom(ctx context.Context, key string, value any) error
	MaskSecret(ctx context.Context, value, name string) error
}

// Run identifies the task instance a task runs as. It decides the default
// sandbox owner ("<dag_id>/<run_id>").
type Run struct {
	DagID    string
	RunID    string
	TaskID   string
	MapIndex int // -1 when not mapped
}

// Owner is the Dag run's owner string, as the Python provider builds it.
func (r Run) Owner() string { return sandbox.OwnerFor(r.DagID, r.RunID) }

// Deps is what every task needs from its surroundings.
type Deps struct {
	Airflow Airflow
	Run     Run
	// Logger receives the task log (command output, progress). nil = discard.
	Logger hclog.Logger
	// Backends are the sandbox backends tasks may open; nil = those the
	// bundle links (registry.Default: each imported backend package
	// registers itself).
	Backends *registry.Registry
	// Stores are the object stores tasks may use; nil = those the bundle
	// links (storage.Default: each imported store package registers
	// itself).
	Stores *storage.Registry
	// Storage is the task's storage handle, which every transfer, check
	// and listing of the task shares, so each bucket is opened once per
	// connection (NewStorage; the catalogue makes one per task instance).
	// nil = each call opens one on Stores and closes it when done.
	Storage *storage.Handle
	// OnExported, when set, is told what an export (export, collect,
	// convert) landed, once it is all in place: the catalogue puts it in
	// the task's asset outlet events.
	OnExported func([]ExportedFile)
	// Defer ends the task deferred (bundles.Defer) and Resumed is the
	// state a resumed run gets back (TaskInstance.Resumed, "" on a first
	// run): what run and convert with deferrable: true need
	// (catalogue.DepsFor fills both).
	Defer   func(poll time.Duration, state any) error
	Resumed string
}

func (d Deps) logger() hclog.Logger {
	if d.Logger == nil {
		return hclog.NewNullLogger()
	}
	return d.Logger
}

func (d Deps) backends() *registry.Registry {
	if d.Backends == nil {
		return registry.Default
	}
	return d.Backends
}

func (d Deps) check() error {
	if d.Airflow == nil {
		return final.Errorf("tasks: Deps.Airflow is nil; pass the task's Airflow client (bundles.Client)")
	}
	return nil
}

// expand fills {dag_id}, {run_id}, {task_id} and {map_index} in s as they
// are (finished_runs names a run as <dag_id>/<run_id>).
func (r Run) expand(s string) string {
	if !strings.Contains(s, "{") {
		return s
	}
	return strings.NewReplacer("{dag_id}", r.DagID, "{run_id}", r.RunID, "{task_id}", r.TaskID,
		"{map_index}", strconv.Itoa(r.MapIndex)).Replace(s)
}

// expandURLs fills the placeholders in every value of m, a field's storage
// URLs, so one config writes each Dag run's outputs to their own keys
// (s3://bucket/reports/{run_id}/report.md) and concurrent runs never
// overwrite each other. Each value becomes exactly one segment of the key
// or path, whatever its characters: it is path-escaped (":" and "+", in
// every run id Airflow makes, stay as they are; "%", "?", "#" or a space
// in a custom run id are escaped, so the key holds them literally), and a
// value that is "/"-bearing, "." or ".." is refused, since it would change
// the key's levels or climb out of the author's directory.
func (r Run) expandURLs(field string, m map[string]string) (map[string]string, error) {
	if m == nil {
		return nil, nil
	}
	values := map[string]string{"{dag_id}": r.DagID, "{run_id}": r.RunID, "{task_id}": r.TaskID, "{map_index}": strconv.Itoa(r.MapIndex)}
	var pairs []string
	for _, ph := range []string{"{dag_id}", "{run_id}", "{task_id}", "{map_index}"} {
		pairs = append(pairs, ph, url.PathEscape(values[ph]))
	}
	rep := strings.NewReplacer(pairs...)
	out := make(map[string]string, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		if strings.Contains(v, "{") {
			for ph, val := range values {
				if !strings.Contains(v, ph) {
					continue
				}
				if val == "" || val == "." || val == ".." || strings.ContainsAny(val, "/\\") {
					return nil, final.Errorf("%s.%s: %s is %q here, which cannot be one segment of a storage key or path (it is empty, . or .., or holds a slash); use another placeholder, or a run id without them", field, k, ph, val)
				}
			}
			v = rep.Replace(v)
		}
		out[k] = v
	}
	return out, nil
}

// expandURL is expandURLs for one URL.
func (r Run) expandURL(url string) (string, error) {
	m, err := r.expandURLs("url", map[string]string{"object": url})
	return m["object"], err
}
