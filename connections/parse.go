package connections

import "errors"

// STUB: replaced by the helper that owns connection parsing.

var errNotImplemented = errors.New("not implemented yet")

// ParseURI parses Airflow's URI form, e.g.
// "aws://AKIA...:secret@/?region_name=eu-west-1". connID names the result.
func ParseURI(connID, uri string) (Connection, error) { return Connection{}, errNotImplemented }

// ParseJSON parses Airflow's JSON form: {"conn_type": ..., "host": ..., "extra": {...} or "..."}.
func ParseJSON(connID string, data []byte) (Connection, error) {
	return Connection{}, errNotImplemented
}

// FromEnv reads AIRFLOW_CONN_<CONN_ID upper-cased> (URI or JSON form).
// ok is false when the variable is not set.
func FromEnv(connID string) (c Connection, ok bool, err error) {
	return Connection{}, false, errNotImplemented
}

// LoadFile reads a connections file (YAML or JSON mapping conn_id -> URI
// string or connection object, as Airflow's local filesystem secrets backend).
func LoadFile(path string) (map[string]Connection, error) { return nil, errNotImplemented }
