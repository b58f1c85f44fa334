// Package bundles is the bundle runtime: what Airflow's Go SDK would provide
// if we could import it. A Go program registers functions as the tasks of
// its Dags (Bundle.Register), and each task instance Airflow forks runs one
// of them: the runtime speaks the coordinator protocol (docs/protocol.md),
// binds the task's inputs, calls the function and reports its outcome. It
// knows nothing of sandboxes.
//
// # Task functions
//
// A task function may take, in any order: context.Context (cancelled when
// Airflow stops the task or its execution timeout passes), TaskInstance or
// *TaskInstance, DagRun or *DagRun, hclog.Logger (the task log), *Outlets,
// Client or any narrower interface the client satisfies (one with just
// GetConnection, say), and at most one input struct (or pointer to one)
// whose fields bind by their json names. It returns error or (T, error); T
// is pushed as the XCom return_value.
//
// An input's value comes from, highest first: an argument of the stub call
// (Airflow 3.4's arg_bindings), its binding (WithXCom, WithParam,
// WithTemplate, WithExpandXCom, WithAssetEvent, ...), the dag_run.conf keys
// AllowConf lets a run set, WithDefaults, or the zero value. A conf key
// naming an input the task does not allow fails the task before it runs.
//
// The error chooses the outcome: nil succeeds, Skip ends the task skipped,
// an error marked FailNoRetry fails it even with retries left, and any
// other error fails it for Airflow to retry.
//
// What Airflow applies to a Python task in its task runner and never hands
// an executable, the Go side declares: WithExecutionTimeout,
// WithMultipleOutputs, WithBranch, WithOutlets, WithMapIndexTemplate; the
// check command compares each with the stub Dag.
package bundles

import (
	"context"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
)

// TaskInstance is the running task instance (StartupDetails.ti): ids, try
// number, map index (-1 when not mapped), host, queue and max tries. A task
// function receives it by declaring a TaskInstance parameter.
type TaskInstance = protocol.TaskInstance

// DagRun is the Dag run the task belongs to (StartupDetails.ti_context.dag_run):
// ids, run type, state, dates (zero when Airflow sent null), conf, the asset
// events that triggered it (oldest first) and its partition key. A task
// function receives it by declaring a DagRun parameter.
type DagRun = protocol.DagRun

// XComRef names one XCom. Empty DagID and RunID mean the current run; a nil
// MapIndex means unmapped.
type XComRef struct {
	DagID    string
	RunID    string
	TaskID   string
	Key      string
	MapIndex *int
}

// Client is what a task may ask of Airflow while it runs. A task function
// may instead ask for any narrower interface of its own that Client
// satisfies (say one with just GetConnection), which keeps it easy to test.
type Client interface {
	// GetConnection returns ErrConnectionNotFound (wrapped, naming the id)
	// when Airflow has no such connection.
	GetConnection(ctx context.Context, connID string) (connections.Connection, error)
	// GetVariable reads AIRFLOW_VAR_<KEY> from the environment first, then
	// asks the supervisor. A missing variable is ErrVariableNotFound.
	GetVariable(ctx context.Context, key string) (string, error)
	// GetXCom returns the decoded JSON value, or ErrXComNotFound.
	GetXCom(ctx context.Context, ref XComRef) (any, error)
	// GetMappedXComs returns the values of key ("": return_value) pushed
	// by the mapped instances of taskID in the current run, in map-index
	// order.
	GetMappedXComs(ctx context.Context, taskID, key string) ([]any, error)
	// SetXCom pushes a value under key for the current task instance.
	SetXCom(ctx context.Context, key string, value any) error
	// MaskSecret asks Airflow to redact value from every log.
	MaskSecret(ctx context.Context, value, name string) error
	// GetDagRunState returns the state of any Dag run (queued, running,
	// success, failed), or ErrDagRunNotFound. Airflow's supervisor relays
	// it to the Execution API, so the task needs no credentials.
	GetDagRunState(ctx context.Context, dagID, runID string) (string, error)
	// GetAssetEvents returns the events Airflow recorded for asset (by its
	// name, its URI, or both as given), oldest first; limit > 0 returns only
	// the latest limit. It is Python's inlet_events[asset]: any event of the
	// asset, where DagRun.TriggeringAssetEvents holds only those that
	// triggered this run.
	GetAssetEvents(ctx context.Context, asset Asset, limit int) ([]AssetEvent, error)
	// SetRenderedMapIndex names the running mapped task instance in the
	// UI (its rendered map index; WithMapIndexTemplate does it from
	// inputs). It is shown at once and kept with the task's outcome.
	SetRenderedMapIndex(ctx context.Context, name string) error
}

// Typed not-found errors; match them with errors.Is. Each is final
// (ErrFailNoRetry): a task failing on one is not retried, since what it
// reads will not appear by itself.
var (
	ErrConnectionNotFound = connections.ErrNotFound
	ErrVariableNotFound   = final.New("variable not found")
	ErrXComNotFound       = final.New("xcom not found")
	ErrDagRunNotFound     = final.New("dag run not found")
)
