// Package connections models Airflow Connections (the URI and JSON forms, the
// AIRFLOW_CONN_<ID> environment variables, a connections file). The
// sandbox backends and storage drivers turn a Connection into their own
// configuration in their own packages, so this one links no SDK.
//
// It knows nothing of sandboxes or of the coordinator protocol: both the bundle
// runtime (which receives ConnectionResult frames) and the local supervisor
// (which serves them) share this one model.
package connections

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	"github.com/airflow-sandbox/airflow-go-worker/redact"
)

// ErrNotFound means Airflow has no connection with the requested id. The
// bundle runtime returns it (wrapped, naming the id) from GetConnection, so
// code that does not import the runtime can still recognise it. It is
// final (internal/final): retrying will not create the connection.
var ErrNotFound = final.New("connection not found")

// Connection is one Airflow connection, as a ConnectionResult carries it.
// Extra is the raw JSON text Airflow stores; use ExtraMap to read it.
type Connection struct {
	ConnID   string `json:"conn_id" yaml:"conn_id"`
	ConnType string `json:"conn_type" yaml:"conn_type"`
	Host     string `json:"host,omitempty" yaml:"host,omitempty"`
	Schema   string `json:"schema,omitempty" yaml:"schema,omitempty"`
	Login    string `json:"login,omitempty" yaml:"login,omitempty"`
	Password string `json:"password,omitempty" yaml:"password,omitempty"`
	Port     int    `json:"port,omitempty" yaml:"port,omitempty"`
	Extra    string `json:"extra,omitempty" yaml:"extra,omitempty"`
}

// ExtraMap decodes Extra. An empty Extra is an empty map; Extra that is not a
// JSON object is an error naming the connection, since silently ignoring it
// would drop settings the Dag author meant to apply.
func (c Connection) ExtraMap() (map[string]any, error) {
	out := map[string]any{}
	if c.Extra == "" {
		return out, nil
	}
	if err := json.Unmarshal([]byte(c.Extra), &out); err != nil {
		return nil, final.Errorf("connection %q: extra is not a JSON object (%v); fix the connection's Extra field", c.ConnID, err)
	}
	return out, nil
}

// ExtraString is the string value v of the connection's extra key, trimmed:
// "" when it is absent (nil), an error naming the connection and the key
// when it is not a string.
func (c Connection) ExtraString(key string, v any) (string, error) {
	if v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", final.Errorf("connection %q: extra %s must be a string, got %T; fix the connection's Extra", c.ConnID, key, v)
	}
	return strings.TrimSpace(s), nil
}

// String never includes the password, nor the host's userinfo or query
// values, nor its path (redact.Host: a webhook token is often a path
// segment), so a Connection can be logged safely.
func (c Connection) String() string {
	pw := ""
	if c.Password != "" {
		pw = " password=***"
	}
	return fmt.Sprintf("Connection(%s type=%s host=%s port=%d login=%s%s)", c.ConnID, c.ConnType, redact.Host(c.Host), c.Port, c.Login, pw)
}
