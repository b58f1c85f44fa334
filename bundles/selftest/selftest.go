// Package selftest registers the airflow_go_worker_selftest Dag, shipped in
// the binary so an operator can check a deployment end to end: the protocol
// (ping), connections and secret masking (connection), XCom (xcom_roundtrip),
// variables (variable), failure reporting (fail) and cancellation (sleep).
package selftest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/schema"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
	"github.com/airflow-sandbox/airflow-go-worker/internal/buildinfo"
	"github.com/airflow-sandbox/airflow-go-worker/redact"
)

// DagID is the self-test Dag's id.
const DagID = "airflow_go_worker_selftest"

// DefaultXComKey is the key xcom_roundtrip uses unless told otherwise.
const DefaultXComKey = "selftest_roundtrip"

// DefaultVariableKey is the variable the variable task reads unless told
// otherwise.
const DefaultVariableKey = "airflow_go_worker_selftest"

// ErrDeliberate is what the fail task returns.
var ErrDeliberate = errors.New("selftest: deliberate failure (the fail task always fails)")

// Register adds the self-test tasks to b in a fixed order. Their inputs
// come from dag_run.conf: a self-test is triggered by the operator checking
// a deployment, who names the connection to check. So whoever may trigger
// the self-test Dag learns a named connection's non-secret fields (type,
// host, port, login); the password is masked and never returned.
func Register(b *bundles.Bundle) {
	b.Register(DagID, "ping", Ping)
	b.Register(DagID, "connection", Connection, bundles.AllowConf("conn_id"))
	b.Register(DagID, "xcom_roundtrip", XComRoundTrip, bundles.WithDefaults(map[string]any{
		"key":   DefaultXComKey,
		"value": map[string]any{"hello": "airflow", "n": 42},
	}), bundles.AllowConf("key", "value"))
	b.Register(DagID, "variable", Variable, bundles.WithDefaults(map[string]any{"key": DefaultVariableKey}), bundles.AllowConf("key"))
	b.Register(DagID, "fail", Fail)
	b.Register(DagID, "sleep", Sleep, bundles.WithDefaults(map[string]any{"seconds": 1}), bundles.AllowConf("seconds"))
}

// PingResult identifies the running bundle.
type PingResult struct {
	BundleVersion           string `json:"bundle_version"`
	GoVersion               string `json:"go_version"`
	SupervisorSchemaVersion string `json:"supervisor_schema_version"`
	Hostname                string `json:"hostname,omitempty"`
}

// Ping proves the protocol path works and says what is deployed.
func Ping(ti bundles.TaskInstance, log hclog.Logger) (PingResult, error) {
	r := PingResult{BundleVersion: buildinfo.Version(), GoVersion: runtime.Version(), SupervisorSchemaVersion: schema.Declared(), Hostname: ti.Hostname}
	log.Info("pong", "bundle_version", r.BundleVersion, "go_version", r.GoVersion)
	return r, nil
}

// ConnectionInput names the connection to check.
type ConnectionInput struct {
	ConnID string `json:"conn_id"`
}

// ConnectionResult describes a connection without its secrets: no
// password, and a host without userinfo, path, query or parameter values
// (redact.Host).
type ConnectionResult struct {
	ConnID    string   `json:"conn_id"`
	ConnType  string   `json:"conn_type"`
	Host      string   `json:"host"`
	Port      int      `json:"port"`
	Login     string   `json:"login"`
	FieldsSet []string `json:"fields_set"`
}

// Connection resolves a connection at run time and reports its shape. The
// password is masked with Airflow and never returned.
func Connection(ctx context.Context, c bundles.Client, log hclog.Logger, in ConnectionInput) (ConnectionResult, error) {
	if in.ConnID == "" {
		return ConnectionResult{}, errors.New("input conn_id is required: pass it as an argument or in dag_run.conf")
	}
	conn, err := c.GetConnection(ctx, in.ConnID)
	if err != nil {
		return ConnectionResult{}, err
	}
	if conn.Password != "" {
		if err := c.MaskSecret(ctx, conn.Password, in.ConnID+".password"); err != nil {
			return ConnectionResult{}, err
		}
	}
	// The host may be a URL with credentials in its userinfo, query,
	// ";" parameters or path (https://user:pw@h/?token=...,
	// https://hooks.example.com/services/<token>): whoever triggered the
	// run sees this.
	r := ConnectionResult{ConnID: in.ConnID, ConnType: conn.ConnType, Host: redact.Host(conn.Host), Port: conn.Port, Login: conn.Login, FieldsSet: []string{}}
	for _, f := range []struct {
		name string
		set  bool
	}{{"conn_type", conn.ConnType != ""}, {"host", conn.Host != ""}, {"schema", conn.Schema != ""}, {"login", conn.Login != ""},
		{"password", conn.Password != ""}, {"port", conn.Port != 0}, {"extra", conn.Extra != ""}} {
		if f.set {
			r.FieldsSet = append(r.FieldsSet, f.name)
		}
	}
	// What the result shows, not conn.String(), which keeps the host's
	// path.
	log.Info("connection resolved", "conn_id", r.ConnID, "conn_type", r.ConnType, "host", r.Host, "port", r.Port, "login", r.Login, "fields_set", r.FieldsSet)
	return r, nil
}

// XComInput is what xcom_roundtrip pushes.
type XComInput struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
}

// XComRoundTrip pushes a value, reads it back through the supervisor and
// returns what came back.
func XComRoundTrip(ctx context.Context, c bundles.Client, ti bundles.TaskInstance, in XComInput) (any, error) {
	if in.Key == "" || in.Key == protocol.ReturnValueKey {
		return nil, fmt.Errorf("input key %q is not allowed: use a key other than %q", in.Key, protocol.ReturnValueKey)
	}
	if err := c.SetXCom(ctx, in.Key, in.Value); err != nil {
		return nil, err
	}
	got, err := c.GetXCom(ctx, bundles.XComRef{TaskID: ti.TaskID, Key: in.Key})
	if err != nil {
		return nil, fmt.Errorf("reading back XCom %q: %w", in.Key, err)
	}
	return got, nil
}

// VariableInput names the variable to read.
type VariableInput struct {
	Key string `json:"key"`
}

// VariableResult says whether the variable exists, never its value:
// variables may hold secrets, which must not reach XCom.
type VariableResult struct {
	Key    string `json:"key"`
	Found  bool   `json:"found"`
	Length int    `json:"length"`
}

// Variable reads an Airflow variable (AIRFLOW_VAR_<KEY> first, then the
// supervisor). A missing variable is an answer too, so it succeeds with
// found false; any other error fails the task.
func Variable(ctx context.Context, c bundles.Client, log hclog.Logger, in VariableInput) (VariableResult, error) {
	if in.Key == "" {
		return VariableResult{}, errors.New("input key is empty: name the variable to read")
	}
	v, err := c.GetVariable(ctx, in.Key)
	if errors.Is(err, bundles.ErrVariableNotFound) {
		log.Info("variable not found", "key", in.Key)
		return VariableResult{Key: in.Key}, nil
	}
	if err != nil {
		return VariableResult{}, err
	}
	log.Info("variable read", "key", in.Key, "length", len(v))
	return VariableResult{Key: in.Key, Found: true, Length: len(v)}, nil
}

// Fail always fails, to check failure and retry reporting.
func Fail(log hclog.Logger) error {
	log.Info("failing on purpose")
	return ErrDeliberate
}

// SleepInput is how long to sleep.
type SleepInput struct {
	Seconds float64 `json:"seconds"`
}

// Sleep waits, returning early with an error when cancelled (SIGTERM).
func Sleep(ctx context.Context, log hclog.Logger, in SleepInput) (map[string]any, error) {
	d := time.Duration(in.Seconds * float64(time.Second))
	log.Info("sleeping", "seconds", in.Seconds)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return map[string]any{"slept_seconds": in.Seconds}, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("sleep cancelled after less than %s: %w", d, ctx.Err())
	}
}
