package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	polling "github.com/airflow-sandbox/airflow-go-worker/internal/poll"
)

// apiClient talks to Airflow's public REST API (/api/v2) as the simple auth
// manager's user, with a JWT from /auth/token.
type apiClient struct {
	base, user, password string
	http                 *http.Client
	token                string
}

func newAPIClient(base, user, password string) *apiClient {
	return &apiClient{base: base, user: user, password: password, http: &http.Client{Timeout: time.Minute}}
}

// errStatus is a non-2xx answer.
type errStatus struct {
	code int
	body string
}

func (e *errStatus) Error() string {
	return fmt.Sprintf("HTTP %d: %s", e.code, strings.TrimSpace(e.body))
}

func isStatus(err error, code int) bool {
	var e *errStatus
	return errors.As(err, &e) && e.code == code
}

// do sends a request and decodes a JSON answer into out (when non-nil).
func (c *apiClient) do(ctx context.Context, method, path string, body, out any, accept string) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if accept == "" {
		accept = "application/json"
	}
	req.Header.Set("Accept", accept)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %w", method, path, &errStatus{resp.StatusCode, string(data)})
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = data
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: the answer is not the JSON expected (%v): %.300s", method, path, err, data)
	}
	return nil
}

// poll calls try every interval until it reports done, returns an error,
// alive reports a dead component, or timeout passes (then it fails with
// what, and the last not-yet reason).
func poll(ctx context.Context, timeout, interval time.Duration, what string, alive func() error, try func() (bool, string, error)) error {
	last := ""
	err := polling.Until(ctx, timeout, polling.Every(interval), func() (bool, error) {
		done, why, err := try()
		if done || err != nil {
			return done, err
		}
		last = why
		if alive != nil {
			if err := alive(); err != nil {
				return false, fmt.Errorf("while waiting for %s: %w", what, err)
			}
		}
		return false, nil
	})
	if errors.Is(err, polling.ErrTimeout) {
		return fmt.Errorf("%s did not happen within %s (last: %s)", what, timeout, last)
	}
	return err
}

// waitHealthy waits for the api-server to answer and to report the
// metadatabase, the scheduler and the dag-processor healthy, then logs in.
func (c *apiClient) waitHealthy(ctx context.Context, timeout time.Duration, alive func() error) error {
	start := time.Now()
	nextNote := start.Add(15 * time.Second)
	err := poll(ctx, timeout, time.Second, "Airflow to report healthy", alive, func() (bool, string, error) {
		var h map[string]struct {
			Status *string `json:"status"`
		}
		err := c.do(ctx, http.MethodGet, "/api/v2/monitor/health", nil, &h, "")
		if err != nil {
			return false, err.Error(), nil
		}
		var sick []string
		for _, part := range []string{"metadatabase", "scheduler", "dag_processor"} {
			if s := h[part].Status; s == nil || *s != "healthy" {
				sick = append(sick, part)
			}
		}
		if len(sick) == 0 {
			return true, "", nil
		}
		if time.Now().After(nextNote) {
			info("still starting (%s): waiting for %s", time.Since(start).Round(time.Second), strings.Join(sick, ", "))
			nextNote = time.Now().Add(15 * time.Second)
		}
		return false, "not healthy yet: " + strings.Join(sick, ", "), nil
	})
	if err != nil {
		return err
	}
	info("healthy after %s", time.Since(start).Round(time.Second))
	return c.login(ctx)
}

// login gets a JWT for the user with its password (POST /auth/token).
func (c *apiClient) login(ctx context.Context) error {
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := c.do(ctx, http.MethodPost, "/auth/token", map[string]string{"username": c.user, "password": c.password}, &tok, ""); err != nil {
		return fmt.Errorf("logging in to the api-server: %w", err)
	}
	if tok.AccessToken == "" {
		return errors.New("logging in to the api-server: /auth/token returned no access_token")
	}
	c.token = tok.AccessToken
	return nil
}

// waitDag waits until the dag-processor has parsed dagID, failing at once
// with the import error when the file did not import.
func (c *apiClient) waitDag(ctx context.Context, dagID string, timeout time.Duration, alive func() error) error {
	err := poll(ctx, timeout, 2*time.Second, "Dag "+dagID+" to be parsed", alive, func() (bool, string, error) {
		var ie struct {
			ImportErrors []struct {
				Filename   string `json:"filename"`
				StackTrace string `json:"stack_trace"`
			} `json:"import_errors"`
		}
		if err := c.do(ctx, http.MethodGet, "/api/v2/importErrors", nil, &ie, ""); err != nil {
			return false, err.Error(), nil // busy or restarting: ask again
		}
		for _, e := range ie.ImportErrors {
			return false, "", fmt.Errorf("Airflow could not import the Dag file %s:\n%s", e.Filename, e.StackTrace)
		}
		err := c.do(ctx, http.MethodGet, "/api/v2/dags/"+url.PathEscape(dagID), nil, nil, "")
		if isStatus(err, http.StatusNotFound) {
			return false, "not parsed yet", nil
		}
		if err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
	if err != nil {
		return err
	}
	// Dags are created unpaused here (dags_are_paused_at_creation), but
	// say so explicitly: a paused Dag's runs would wait forever.
	return c.do(ctx, http.MethodPatch, "/api/v2/dags/"+url.PathEscape(dagID), map[string]bool{"is_paused": false}, nil, "")
}

// dagRun is one triggered run and what became of it.
type dagRun struct {
	scenario *scenario
	runID    string
	state    string
	tasks    map[string]taskState
}

type taskState struct {
	state string // "none" before the scheduler set one
	try   int
	host  string // the hostname of the worker its latest try ran on
	// rendered is a mapped instance's rendered map index ("" when none).
	rendered string
}

// instanceKey is a run's key of a task instance: its task id, with
// "[map_index]" for a mapped instance (convert[2]).
func instanceKey(taskID string, mapIndex int) string {
	if mapIndex < 0 {
		return taskID
	}
	return fmt.Sprintf("%s[%d]", taskID, mapIndex)
}

// splitInstanceKey undoes instanceKey: the task id and the query naming
// its map index ("" for an unmapped task).
func splitInstanceKey(key string) (taskID, query string) {
	id, rest, ok := strings.Cut(key, "[")
	if !ok {
		return key, ""
	}
	return id, "?map_index=" + strings.TrimSuffix(rest, "]")
}

// taskIDs are the run's task ids, sorted.
func (r *dagRun) taskIDs() []string {
	ids := make([]string, 0, len(r.tasks))
	for id := range r.tasks {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (r *dagRun) summaryLine() string {
	return fmt.Sprintf("%s %s %s", r.scenario.dagID, r.runID, r.state)
}

// trigger starts a run with an empty dag_run.conf, as a scheduled run has.
func (c *apiClient) trigger(ctx context.Context, dagID, runID string) error {
	body := map[string]any{"dag_run_id": runID, "logical_date": nil, "conf": map[string]any{}}
	return c.do(ctx, http.MethodPost, "/api/v2/dags/"+url.PathEscape(dagID)+"/dagRuns", body, nil, "")
}

func (c *apiClient) runState(ctx context.Context, r *dagRun) error {
	var run struct {
		State string `json:"state"`
	}
	p := "/api/v2/dags/" + url.PathEscape(r.scenario.dagID) + "/dagRuns/" + url.PathEscape(r.runID)
	if err := c.do(ctx, http.MethodGet, p, nil, &run, ""); err != nil {
		return err
	}
	var tis struct {
		TaskInstances []struct {
			TaskID           string  `json:"task_id"`
			MapIndex         int     `json:"map_index"`
			RenderedMapIndex *string `json:"rendered_map_index"`
			State            *string `json:"state"`
			TryNumber        int     `json:"try_number"`
			Hostname         *string `json:"hostname"`
		} `json:"task_instances"`
	}
	if err := c.do(ctx, http.MethodGet, p+"/taskInstances", nil, &tis, ""); err != nil {
		return err
	}
	r.state = run.State
	r.tasks = map[string]taskState{}
	for _, ti := range tis.TaskInstances {
		ts := newTaskState(ti.State, ti.TryNumber, ti.Hostname)
		if ti.RenderedMapIndex != nil {
			ts.rendered = *ti.RenderedMapIndex
		}
		r.tasks[instanceKey(ti.TaskID, ti.MapIndex)] = ts
	}
	return nil
}

// awaitRun waits for a run of dagID whose id begins with prefix (one the
// scheduler starts, such as asset_triggered__) and returns its id.
func (c *apiClient) awaitRun(ctx context.Context, dagID, prefix string, timeout time.Duration, alive func() error) (string, error) {
	var id string
	err := poll(ctx, timeout, 2*time.Second, "a run of "+dagID+" named "+prefix+"...", alive, func() (bool, string, error) {
		var runs struct {
			DagRuns []struct {
				RunID string `json:"dag_run_id"`
			} `json:"dag_runs"`
		}
		if err := c.do(ctx, http.MethodGet, "/api/v2/dags/"+url.PathEscape(dagID)+"/dagRuns", nil, &runs, ""); err != nil {
			return false, err.Error(), nil
		}
		for _, r := range runs.DagRuns {
			if strings.HasPrefix(r.RunID, prefix) {
				id = r.RunID
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%d runs, none named %s...", len(runs.DagRuns), prefix), nil
	})
	return id, err
}

// assetEvent is one asset event that triggered a run, as the REST API
// lists it.
type assetEvent struct {
	Name         string         `json:"name"`
	URI          string         `json:"uri"`
	Extra        map[string]any `json:"extra"`
	SourceDagID  string         `json:"source_dag_id"`
	SourceRunID  string         `json:"source_run_id"`
	SourceTaskID string         `json:"source_task_id"`
}

// upstreamAssetEvents are the asset events that triggered run r.
func (c *apiClient) upstreamAssetEvents(ctx context.Context, r *dagRun) ([]assetEvent, error) {
	var evs struct {
		AssetEvents []assetEvent `json:"asset_events"`
	}
	p := "/api/v2/dags/" + url.PathEscape(r.scenario.dagID) + "/dagRuns/" + url.PathEscape(r.runID) + "/upstreamAssetEvents"
	if err := c.do(ctx, http.MethodGet, p, nil, &evs, ""); err != nil {
		return nil, fmt.Errorf("the asset events that triggered %s: %w", r.runID, err)
	}
	return evs.AssetEvents, nil
}

func newTaskState(state *string, try int, host *string) taskState {
	ts := taskState{state: "none", try: try}
	if state != nil {
		ts.state = *state
	}
	if host != nil {
		ts.host = *host
	}
	return ts
}

// xcom reads a task's XCom value (the REST API gives it deserialized, as
// JSON); taskID may name a mapped instance (instanceKey).
func (c *apiClient) xcom(ctx context.Context, r *dagRun, taskID, key string, out any) error {
	var entry struct {
		Value json.RawMessage `json:"value"`
	}
	id, query := splitInstanceKey(taskID)
	p := "/api/v2/dags/" + url.PathEscape(r.scenario.dagID) + "/dagRuns/" + url.PathEscape(r.runID) +
		"/taskInstances/" + url.PathEscape(id) + "/xcomEntries/" + url.PathEscape(key) + query
	if err := c.do(ctx, http.MethodGet, p, nil, &entry, ""); err != nil {
		return fmt.Errorf("XCom %s of %s: %w", key, taskID, err)
	}
	if err := json.Unmarshal(entry.Value, out); err != nil {
		return fmt.Errorf("XCom %s of %s is %s, not the shape expected: %v", key, taskID, entry.Value, err)
	}
	return nil
}

// taskLog is the text of a task's log for one try, one event a line.
func (c *apiClient) taskLog(ctx context.Context, r *dagRun, taskID string, try int) (string, error) {
	var raw []byte
	id, query := splitInstanceKey(taskID)
	p := fmt.Sprintf("/api/v2/dags/%s/dagRuns/%s/taskInstances/%s/logs/%d%s", url.PathEscape(r.scenario.dagID), url.PathEscape(r.runID), url.PathEscape(id), try, query)
	if err := c.do(ctx, http.MethodGet, p, nil, &raw, "application/x-ndjson"); err != nil {
		return "", err
	}
	var lines []string
	for _, l := range bytes.Split(raw, []byte("\n")) {
		var ev map[string]any
		if json.Unmarshal(l, &ev) != nil {
			continue
		}
		event, _ := ev["event"].(string)
		level, _ := ev["level"].(string)
		var extra []string
		for k, v := range ev {
			switch k {
			case "event", "level", "timestamp", "logger", "dag_id", "task_id", "try_number":
				continue
			}
			extra = append(extra, fmt.Sprintf("%s=%v", k, v))
		}
		lines = append(lines, strings.TrimSpace(fmt.Sprintf("%-7s %s %s", level, event, strings.Join(extra, " "))))
	}
	return strings.Join(lines, "\n"), nil
}

// printFailedTasks prints, from the REST API, the log of every try of a
// task that did not succeed, and of the failed tries of a task that
// succeeded only on a retry: a failure explains itself, and so does a run
// that took a minute longer than it should have.
func (c *apiClient) printFailedTasks(ctx context.Context, r *dagRun) {
	for _, task := range r.taskIDs() {
		ts := r.tasks[task]
		last := ts.try
		if ts.state == "success" {
			if ts.try <= 1 {
				continue
			}
			last = ts.try - 1
			fmt.Printf("    %s: task %s succeeded on try %d\n", r.scenario.dagID, task, ts.try)
		} else {
			fmt.Printf("    %s: task %s is %s\n", r.scenario.dagID, task, ts.state)
		}
		for try := 1; try <= last; try++ {
			text, err := c.taskLog(ctx, r, task, try)
			if err != nil {
				fmt.Printf("      (no log for try %d: %v)\n", try, err)
				continue
			}
			fmt.Printf("      --- log of %s, try %d ---\n", task, try)
			for _, l := range strings.Split(text, "\n") {
				if strings.HasPrefix(l, "::") {
					continue // Airflow's log-group markers
				}
				fmt.Printf("      | %s\n", l)
			}
		}
	}
}

// taskTry is one try of a task instance, from its try history.
type taskTry struct {
	Try      int      `json:"try_number"`
	State    *string  `json:"state"`
	Duration *float64 `json:"duration"` // seconds, from start to end
}

func (t taskTry) state() string {
	if t.State == nil {
		return "none"
	}
	return *t.State
}

// tries is a task instance's try history, oldest first; taskID may name
// a mapped instance (instanceKey).
func (c *apiClient) tries(ctx context.Context, r *dagRun, taskID string) ([]taskTry, error) {
	var h struct {
		TaskInstances []taskTry `json:"task_instances"`
	}
	id, query := splitInstanceKey(taskID)
	p := "/api/v2/dags/" + url.PathEscape(r.scenario.dagID) + "/dagRuns/" + url.PathEscape(r.runID) +
		"/taskInstances/" + url.PathEscape(id) + "/tries" + query
	if err := c.do(ctx, http.MethodGet, p, nil, &h, ""); err != nil {
		return nil, fmt.Errorf("the tries of %s: %w", taskID, err)
	}
	sort.Slice(h.TaskInstances, func(i, j int) bool { return h.TaskInstances[i].Try < h.TaskInstances[j].Try })
	return h.TaskInstances, nil
}

// xcomKeys are the keys of the XComs a task instance left, sorted.
func (c *apiClient) xcomKeys(ctx context.Context, r *dagRun, taskID string) ([]string, error) {
	var list struct {
		Entries []struct {
			Key string `json:"key"`
		} `json:"xcom_entries"`
	}
	id, query := splitInstanceKey(taskID)
	if query == "" {
		query = "?map_index=-1"
	}
	p := "/api/v2/dags/" + url.PathEscape(r.scenario.dagID) + "/dagRuns/" + url.PathEscape(r.runID) +
		"/taskInstances/" + url.PathEscape(id) + "/xcomEntries" + query
	if err := c.do(ctx, http.MethodGet, p, nil, &list, ""); err != nil {
		return nil, fmt.Errorf("the XComs of %s: %w", taskID, err)
	}
	keys := make([]string, len(list.Entries))
	for i, e := range list.Entries {
		keys[i] = e.Key
	}
	sort.Strings(keys)
	return keys, nil
}

// variable is an Airflow Variable's value; found is false when there is
// no such Variable.
func (c *apiClient) variable(ctx context.Context, key string) (value string, found bool, err error) {
	var v struct {
		Value string `json:"value"`
	}
	err = c.do(ctx, http.MethodGet, "/api/v2/variables/"+url.PathEscape(key), nil, &v, "")
	if isStatus(err, http.StatusNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("Variable %s: %w", key, err)
	}
	return v.Value, true, nil
}
