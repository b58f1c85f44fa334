package tasks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Duration reads either a Go duration string ("90m", "1h30m") or a number of
// seconds (5400), the two forms Dag authors write.
type Duration time.Duration

// UnmarshalJSON accepts "1h", "90s", 3600 or "3600".
func (d *Duration) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		*d = 0
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := ParseDuration(s)
		if err != nil {
			return err
		}
		*d = Duration(v)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil {
		return fmt.Errorf("%s is neither a duration such as \"1h30m\" nor a number of seconds", b)
	}
	v, err := secondsToDuration(secs)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// ParseDuration parses "1h30m" or a bare number of seconds ("3600").
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		return secondsToDuration(secs)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is neither a duration such as \"1h30m\" nor a number of seconds", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("%q is negative; give a positive duration", s)
	}
	return v, nil
}

func secondsToDuration(secs float64) (time.Duration, error) {
	if secs < 0 || math.IsNaN(secs) || secs > float64(math.MaxInt64/int64(time.Second)) {
		return 0, fmt.Errorf("%v is not a usable number of seconds; give a positive number such as 3600", secs)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// EnvSource says where one sandbox variable's value comes from at run time:
// a field of an Airflow connection, or an Airflow variable.
type EnvSource struct {
	Connection string `json:"connection,omitempty"`
	// Field is login, password, host, schema, port or extra.<key>; default password.
	Field    string `json:"field,omitempty"`
	Variable string `json:"variable,omitempty"`
}

// SandboxRef names an existing sandbox. It accepts the bare id a provision
// task returns, or the structured record it pushes under XCom key "sandbox".
type SandboxRef struct {
	ID      string
	Backend string // "" when only the id is known
	ConnID  string
}

// UnmarshalJSON accepts "sb-123" or {"id": "sb-123", "backend": "modal", ...}.
func (r *SandboxRef) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		*r = SandboxRef{}
		return nil
	}
	var id string
	if err := json.Unmarshal(b, &id); err == nil {
		*r = SandboxRef{ID: strings.TrimSpace(id)}
		return nil
	}
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return fmt.Errorf("sandbox: %s is neither a sandbox id nor a provision record ({\"id\": ..., \"backend\": ...})", b)
	}
	*r = SandboxRef{ID: rec.ID, Backend: rec.Backend, ConnID: rec.ConnID}
	return nil
}

// MarshalJSON writes the bare id.
func (r SandboxRef) MarshalJSON() ([]byte, error) { return json.Marshal(r.ID) }

// Record is what provision pushes under XCom key "sandbox": enough for a later
// task to find the sandbox again. It never carries credentials.
type Record struct {
	Backend   string `json:"backend"`
	ID        string `json:"id"`
	Name      string `json:"name"`
	ConnID    string `json:"conn_id,omitempty"`
	Workdir   string `json:"workdir,omitempty"`
	ExpiresAt string `json:"expires_at,omitempty"` // RFC 3339, UTC
	Owner     string `json:"owner,omitempty"`
	// Host is the worker host a sandbox that lives on one host (local) was
	// created on; every task using it must run there.
	Host string `json:"host,omitempty"`
}

// RecordXComKey is the XCom key provision pushes its Record under.
const RecordXComKey = "sandbox"

// Commands is one command or a list of them.
type Commands []string

// UnmarshalJSON accepts "cmd" or ["cmd1", "cmd2"].
func (c *Commands) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		*c = nil
		return nil
	}
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*c = Commands{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("command: %s is neither a command string nor a list of command strings", b)
	}
	*c = many
	return nil
}
