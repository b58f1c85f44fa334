package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
)

// xcomPath maps an XCom to its file; each id is path-escaped so run ids
// such as "manual__2026-11-29T00:00:00+00:00" and odd keys stay inside
// StateDir.
func (s *Supervisor) xcomPath(dagID, runID, taskID, key string) (string, error) {
	parts := []string{dagID, runID, taskID, key}
	for i, p := range parts {
		if p == "" {
			return "", errors.New("XCom dag_id, run_id, task_id and key must all be set")
		}
		e := url.PathEscape(p)
		if e == "." || e == ".." {
			e = strings.ReplaceAll(e, ".", "%2E")
		}
		parts[i] = e
	}
	return filepath.Join(s.StateDir, "xcom", parts[0], parts[1], parts[2], parts[3]+".json"), nil
}

func memKey(dagID, runID, taskID, key string) string {
	return strings.Join([]string{dagID, runID, taskID, key}, "\x00")
}

// GetXCom reads a stored XCom; ok is false when there is none.
func (s *Supervisor) GetXCom(dagID, runID, taskID, key string) (value any, ok bool, err error) {
	if s.StateDir == "" {
		s.memMu.Lock()
		defer s.memMu.Unlock()
		v, ok := s.mem[memKey(dagID, runID, taskID, key)]
		return v, ok, nil
	}
	p, err := s.xcomPath(dagID, runID, taskID, key)
	if err != nil {
		return nil, false, err
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading XCom %s: %w", p, err)
	}
	if err := json.Unmarshal(data, &value); err != nil {
		return nil, false, fmt.Errorf("XCom file %s is not JSON (%v); delete it or fix it", p, err)
	}
	return value, true, nil
}

// PutXCom stores an XCom value (JSON-encodable), replacing any previous one.
func (s *Supervisor) PutXCom(dagID, runID, taskID, key string, value any) error {
	data, err := json.Marshal(value)
	if err != nil {
		return fmt.Errorf("XCom %s of %s: value is not JSON-encodable: %w", key, taskID, err)
	}
	if s.StateDir == "" {
		var v any
		json.Unmarshal(data, &v)
		s.memMu.Lock()
		defer s.memMu.Unlock()
		if s.mem == nil {
			s.mem = map[string]any{}
		}
		s.mem[memKey(dagID, runID, taskID, key)] = v
		return nil
	}
	p, err := s.xcomPath(dagID, runID, taskID, key)
	if err != nil {
		return err
	}
	// XComs may hold what a task returned from a secret-bearing source:
	// only the worker's user reads them (0700 directories, 0600 files).
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("creating the XCom state directory: %w", err)
	}
	// CreateTemp makes a fresh 0600 file; reusing a fixed name would keep
	// the mode of one a crash left behind.
	f, err := os.CreateTemp(filepath.Dir(p), filepath.Base(p)+".*.tmp")
	if err != nil {
		return fmt.Errorf("writing XCom %s: %w", p, err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing XCom %s: %w", p, err)
	}
	return nil
}

// connection resolves connID from AIRFLOW_CONN_<ID> in Env (URI or JSON
// form), then ConnectionsFile.
func (s *Supervisor) connection(connID string) (connections.Connection, bool, error) {
	name := "AIRFLOW_CONN_" + strings.ToUpper(connID)
	if v, ok := s.lookupEnv(name); ok {
		var c connections.Connection
		var err error
		if t := strings.TrimSpace(v); strings.HasPrefix(t, "{") {
			c, err = connections.ParseJSON(connID, []byte(t))
		} else {
			c, err = connections.ParseURI(connID, t)
		}
		if err != nil {
			return c, false, fmt.Errorf("%s is not a valid Airflow connection: %v", name, err)
		}
		if c.ConnID == "" {
			c.ConnID = connID
		}
		return c, true, nil
	}
	if s.ConnectionsFile == "" {
		return connections.Connection{}, false, nil
	}
	all, err := connections.LoadFile(s.ConnectionsFile)
	if err != nil {
		// LoadFile's errors already name the file; wrapping again repeated it.
		return connections.Connection{}, false, err
	}
	c, ok := all[connID]
	if ok && c.ConnID == "" {
		c.ConnID = connID
	}
	return c, ok, nil
}

// connectionResult is a ConnectionResult body, leaving unset fields out as
// Airflow's exclude_unset dump does.
// connectionResult is the reply Airflow's supervisor gives: every field of
// the connection, null when unset (the Execution API returns them all, and
// the supervisor dumps what it was given).
func connectionResult(c connections.Connection) map[string]any {
	body := map[string]any{"type": "ConnectionResult", "conn_id": c.ConnID, "conn_type": c.ConnType}
	for k, v := range map[string]string{"host": c.Host, "schema": c.Schema, "login": c.Login, "password": c.Password, "extra": c.Extra} {
		body[k] = nil
		if v != "" {
			body[k] = v
		}
	}
	body["port"] = nil
	if c.Port != 0 {
		body["port"] = c.Port
	}
	return body
}
