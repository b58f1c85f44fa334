package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
	"github.com/airflow-sandbox/airflow-go-worker/connections"
)

// xcomPath maps an XCom to its file; each id is path-escaped so run ids
// such as "manual__2026-11-29T00:00:00+00:00" and odd keys stay inside
// StateDir.
func (s *Supervisor) xcomPath(dagID, runID, taskID, key string) (string, error) {
	parts, err := escapeSegments(dagID, runID, taskID, key)
	if err != nil {
		return "", errors.New("XCom dag_id, run_id, task_id and key must all be set")
	}
	return filepath.Join(s.StateDir, "xcom", parts[0], parts[1], parts[2], parts[3]+".json"), nil
}

// escapeSegments path-escapes each id into one path segment, refusing an
// empty one.
func escapeSegments(ids ...string) ([]string, error) {
	parts := make([]string, len(ids))
	for i, p := range ids {
		if p == "" {
			return nil, errors.New("empty id")
		}
		e := url.PathEscape(p)
		if e == "." || e == ".." {
			e = strings.ReplaceAll(e, ".", "%2E")
		}
		parts[i] = e
	}
	return parts, nil
}

func memKey(dagID, runID, taskID, key string) string {
	return strings.Join([]string{dagID, runID, taskID, key}, "\x00")
}

// The XComs of a mapped task's instances are kept apart from the
// unmapped slot, one per map index: <key>.mapped/<map_index>.json (in
// memory, the key with the index appended), as Airflow keys XComs by map
// index.
const mappedSuffix = ".mapped"

func mappedKey(key string, mapIndex int) string {
	return key + mappedSuffix + "\x00" + strconv.Itoa(mapIndex)
}

// getXComAt reads the XCom of one task instance (mapIndex -1: unmapped).
func (s *Supervisor) getXComAt(dagID, runID, taskID, key string, mapIndex int) (any, bool, error) {
	if mapIndex < 0 {
		return s.GetXCom(dagID, runID, taskID, key)
	}
	if s.StateDir == "" {
		return s.GetXCom(dagID, runID, taskID, mappedKey(key, mapIndex))
	}
	p, err := s.xcomPath(dagID, runID, taskID, key)
	if err != nil {
		return nil, false, err
	}
	return readXComFile(filepath.Join(strings.TrimSuffix(p, ".json")+mappedSuffix, strconv.Itoa(mapIndex)+".json"))
}

// putXComAt stores the XCom of one task instance.
func (s *Supervisor) putXComAt(dagID, runID, taskID, key string, mapIndex int, value any) error {
	if mapIndex < 0 {
		return s.PutXCom(dagID, runID, taskID, key, value)
	}
	if s.StateDir == "" {
		return s.PutXCom(dagID, runID, taskID, mappedKey(key, mapIndex), value)
	}
	data, err := json.Marshal(value)
	if err != nil {
		return fmt.Errorf("XCom %s of %s[%d]: value is not JSON-encodable: %w", key, taskID, mapIndex, err)
	}
	p, err := s.xcomPath(dagID, runID, taskID, key)
	if err != nil {
		return err
	}
	p = filepath.Join(strings.TrimSuffix(p, ".json")+mappedSuffix, strconv.Itoa(mapIndex)+".json")
	if err := writePrivate(p, data); err != nil {
		return fmt.Errorf("writing XCom %s: %w", p, err)
	}
	return nil
}

// mappedXComs lists the XComs of every mapped instance of a task, by map
// index, as the Execution API's sequence slice does.
func (s *Supervisor) mappedXComs(dagID, runID, taskID, key string) ([]any, error) {
	var indexes []int
	if s.StateDir == "" {
		prefix := memKey(dagID, runID, taskID, key+mappedSuffix) + "\x00"
		s.memMu.Lock()
		for k := range s.mem {
			if rest, ok := strings.CutPrefix(k, prefix); ok {
				if n, err := strconv.Atoi(rest); err == nil {
					indexes = append(indexes, n)
				}
			}
		}
		s.memMu.Unlock()
	} else {
		p, err := s.xcomPath(dagID, runID, taskID, key)
		if err != nil {
			return nil, err
		}
		entries, err := os.ReadDir(strings.TrimSuffix(p, ".json") + mappedSuffix)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		for _, e := range entries {
			if n, err := strconv.Atoi(strings.TrimSuffix(e.Name(), ".json")); err == nil {
				indexes = append(indexes, n)
			}
		}
	}
	sort.Ints(indexes)
	out := make([]any, 0, len(indexes))
	for _, mi := range indexes {
		v, _, err := s.getXComAt(dagID, runID, taskID, key, mi)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func readXComFile(p string) (value any, ok bool, err error) {
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
	return readXComFile(p)
}

// GetMappedXCom reads the stored XCom of one mapped instance.
func (s *Supervisor) GetMappedXCom(dagID, runID, taskID, key string, mapIndex int) (value any, ok bool, err error) {
	return s.getXComAt(dagID, runID, taskID, key, mapIndex)
}

// PutXCom stores an XCom value (JSON-encodable), replacing any previous one.
func (s *Supervisor) PutXCom(dagID, runID, taskID, key string, value any) error {
	data, err := json.Marshal(value)
	if err != nil {
		return fmt.Errorf("XCom %s of %s: value is not JSON-encodable: %w", key, taskID, err)
	}
	if s.StateDir == "" {
		var v any // what Marshal just made decodes
		if err := json.Unmarshal(data, &v); err != nil {
			return fmt.Errorf("XCom %s of %s: %w", key, taskID, err)
		}
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
	if err := writePrivate(p, data); err != nil {
		return fmt.Errorf("writing XCom %s: %w", p, err)
	}
	return nil
}

// writePrivate replaces the file at p with data, atomically. XComs may hold
// what a task returned from a secret-bearing source: only the worker's user
// reads the state directory (0700 directories, 0600 files).
func writePrivate(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("creating the state directory: %w", err)
	}
	// CreateTemp makes a fresh 0600 file; reusing a fixed name would keep
	// the mode of one a crash left behind.
	f, err := os.CreateTemp(filepath.Dir(p), filepath.Base(p)+".*.tmp")
	if err != nil {
		return err
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
	}
	return err
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
func connectionResult(c connections.Connection) *protocol.ConnectionResult {
	orNull := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	r := &protocol.ConnectionResult{ConnID: c.ConnID, ConnType: c.ConnType, Host: orNull(c.Host), Schema: orNull(c.Schema),
		Login: orNull(c.Login), Password: orNull(c.Password), Extra: orNull(c.Extra)}
	if c.Port != 0 {
		r.Port = &c.Port
	}
	return r
}

// Dag run states, as Airflow names them.
const (
	DagRunQueued  = "queued"
	DagRunRunning = "running"
	DagRunSuccess = "success"
	DagRunFailed  = "failed"
)

var dagRunStates = map[string]bool{DagRunQueued: true, DagRunRunning: true, DagRunSuccess: true, DagRunFailed: true}

// dagRunPath is where StateDir keeps a Dag run's state:
// <StateDir>/dag_runs/<dag_id>/<run_id>.json, each id path-escaped.
func (s *Supervisor) dagRunPath(dagID, runID string) (string, error) {
	parts, err := escapeSegments(dagID, runID)
	if err != nil {
		return "", errors.New("a Dag run needs a dag_id and a run_id")
	}
	return filepath.Join(s.StateDir, "dag_runs", parts[0], parts[1]+".json"), nil
}

// SetDagRunState records a Dag run's state (queued, running, success or
// failed), which GetDagRunState then answers.
func (s *Supervisor) SetDagRunState(dagID, runID, state string) error {
	if !dagRunStates[state] {
		return fmt.Errorf("Dag run state %q is not one of queued, running, success, failed", state)
	}
	if s.StateDir == "" {
		s.memMu.Lock()
		defer s.memMu.Unlock()
		if s.memRuns == nil {
			s.memRuns = map[string]string{}
		}
		s.memRuns[dagID+"/"+runID] = state
		return nil
	}
	p, err := s.dagRunPath(dagID, runID)
	if err != nil {
		return err
	}
	data, _ := json.Marshal(map[string]string{"state": state})
	if err := writePrivate(p, data); err != nil {
		return fmt.Errorf("recording the state of Dag run %s/%s: %w", dagID, runID, err)
	}
	return nil
}

// DagRunState answers GetDagRunState: DagRunStates first, then what
// SetDagRunState recorded; ok is false for a run found in neither.
func (s *Supervisor) DagRunState(dagID, runID string) (state string, ok bool, err error) {
	if st, ok := s.DagRunStates[dagID+"/"+runID]; ok {
		return st, true, nil
	}
	if s.StateDir == "" {
		s.memMu.Lock()
		defer s.memMu.Unlock()
		st, ok := s.memRuns[dagID+"/"+runID]
		return st, ok, nil
	}
	p, err := s.dagRunPath(dagID, runID)
	if err != nil {
		return "", false, err
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	var rec struct {
		State string `json:"state"`
	}
	if err == nil {
		err = json.Unmarshal(data, &rec)
	}
	if err != nil || !dagRunStates[rec.State] {
		return "", false, fmt.Errorf("the state file %s of Dag run %s/%s is unreadable (%v); delete it", p, dagID, runID, errOrState(err, rec.State))
	}
	return rec.State, true, nil
}

func errOrState(err error, state string) any {
	if err != nil {
		return err
	}
	return fmt.Sprintf("state %q", state)
}

// dagRunNotFound is what Airflow's supervisor answers for a run the
// Execution API does not have: its 404, relayed as an API_SERVER_ERROR.
func dagRunNotFound(dagID, runID string) *protocol.ErrorResponse {
	msg := fmt.Sprintf("Dag run with dag_id '%s' and run_id '%s' was not found", dagID, runID)
	return &protocol.ErrorResponse{Error: "API_SERVER_ERROR", Detail: map[string]any{
		"status_code": 404, "message": "Server returned error",
		"detail": map[string]any{"detail": map[string]any{"reason": "not_found", "message": msg}},
	}}
}
