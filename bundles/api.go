// Package bundles is the bundle runtime: what Airflow's Go SDK would provide
// if we could import it. Go code registers (dag_id, task_id) -> func; Serve
// speaks the coordinator protocol (shared/specs/airflow-coordinator-protocol.md),
// binds the task's inputs, runs it and reports its outcome.
//
// This file is the public surface task authors program against. It knows
// nothing of sandboxes.
package bundles

import (
	"context"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
)

// TaskInstance is the running task instance, from StartupDetails.ti.
type TaskInstance struct {
	ID           string
	DagID        string
	TaskID       string
	RunID        string
	TryNumber    int
	MapIndex     int // -1 when the task is not mapped
	DagVersionID string
	Hostname     string
	Queue        string
	MaxTries     int
}

// DagRun is the Dag run the task belongs to, from StartupDetails.ti_context.dag_run.
// Zero times mean Airflow sent null.
type DagRun struct {
	DagID             string
	RunID             string
	RunType           string
	State             string
	LogicalDate       time.Time
	DataIntervalStart time.Time
	DataIntervalEnd   time.Time
	RunAfter          time.Time
	StartDate         time.Time
	EndDate           time.Time
	Conf              map[string]any
	// TriggeringAssetEvents are the asset events that triggered an
	// asset-triggered run (ti_context.dag_run.consumed_asset_events),
	// oldest first; empty for other runs.
	TriggeringAssetEvents []AssetEvent
	// PartitionKey is the run's partition key (partitioned assets), or "".
	PartitionKey string
}

// XComRef names one XCom. Empty DagID and RunID mean the current run; a nil
// MapIndex means unmapped.
type XComRef struct {
	DagID    string
	RunID    string
	TaskID   string
	Key      string
	MapIndex *int
}

// ReturnValueKey is the XCom key a task's result is pushed under.
const ReturnValueKey = "return_value"

// Client is what a task may ask of Airflow while it runs. Tasks should accept
// the narrowest interface they need (for example just ConnectionGetter).
type Client interface {
	ConnectionGetter
	// GetVariable reads AIRFLOW_VAR_<KEY> from the environment first, then
	// asks the supervisor. A missing variable is ErrVariableNotFound.
	GetVariable(ctx context.Context, key string) (string, error)
	// GetXCom returns the decoded JSON value, or ErrXComNotFound.
	GetXCom(ctx context.Context, ref XComRef) (any, error)
	// SetXCom pushes a value under key for the current task instance.
	SetXCom(ctx context.Context, key string, value any) error
	// MaskSecret asks Airflow to redact value from every log.
	MaskSecret(ctx context.Context, value, name string) error
	// GetDagRunState returns the state of any Dag run (queued, running,
	// success, failed), or ErrDagRunNotFound. Airflow's supervisor relays
	// it to the Execution API, so the task needs no credentials.
	GetDagRunState(ctx context.Context, dagID, runID string) (string, error)
}

// MappedXComGetter reads the XComs of every mapped instance of a task (the
// runtime client implements it; ask for it by type).
type MappedXComGetter interface {
	// GetMappedXComs returns the values of key pushed by the mapped
	// instances of taskID in the current run, in map-index order.
	GetMappedXComs(ctx context.Context, taskID, key string) ([]any, error)
}

// ConnectionGetter resolves Airflow connections at run time.
type ConnectionGetter interface {
	// GetConnection returns ErrConnectionNotFound (wrapped, naming the id)
	// when Airflow has no such connection.
	GetConnection(ctx context.Context, connID string) (connections.Connection, error)
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
