package bundles

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/redact"
)

// rpc multiplexes requests over the comm socket: one reader goroutine
// routes each reply to the waiter with the same id; replies nobody waits
// for are dropped, as the spec allows.
type rpc struct {
	conn net.Conn

	wmu sync.Mutex // serialises frame writes

	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan protocol.Message
	readErr error // set once the reader stops
	done    chan struct{}
}

// frameTimeout bounds the arrival of the rest of a frame once it has
// started: a supervisor that stops mid-frame fails the task's pending calls
// instead of leaving them waiting forever. Frames may be hours apart; a
// started one is whole within milliseconds on a worker. A var for tests.
var frameTimeout = 30 * time.Second

func newRPC(conn net.Conn) *rpc {
	return &rpc{conn: conn, pending: map[int64]chan protocol.Message{}, done: make(chan struct{})}
}

// start launches the reader. Call it after the first frame has been read
// synchronously.
func (r *rpc) start() {
	go func() {
		defer close(r.done)
		for {
			p, err := protocol.ReadFrameWithin(r.conn, frameTimeout)
			if err == nil {
				var m protocol.Message
				m, err = protocol.DecodeMessage(p)
				if err == nil {
					r.route(m)
					continue
				}
			}
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				err = errors.New("the supervisor closed the comm socket")
			}
			r.mu.Lock()
			r.readErr = err
			for id, ch := range r.pending {
				close(ch)
				delete(r.pending, id)
			}
			r.mu.Unlock()
			return
		}
	}()
}

func (r *rpc) route(m protocol.Message) {
	r.mu.Lock()
	ch, ok := r.pending[m.ID]
	delete(r.pending, m.ID)
	r.mu.Unlock()
	if ok {
		ch <- m
	}
}

// send writes one request frame.
func (r *rpc) send(id int64, body protocol.Body) error {
	p, err := protocol.EncodeRequest(id, body)
	if err != nil {
		return fmt.Errorf("encoding %s request: %w", body.MessageType(), err)
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
	defer r.conn.SetWriteDeadline(time.Time{})
	return protocol.WriteFrame(r.conn, p)
}

// failure returns why the reader stopped, or nil while it still runs.
func (r *rpc) failure() error {
	select {
	case <-r.done:
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.readErr
	default:
		return nil
	}
}

// notify sends body and does not wait for the reply, which the reader
// drops: for what only describes the task (its rendered fields), whose
// failure must neither fail nor delay it.
func (r *rpc) notify(body protocol.Body) error {
	r.mu.Lock()
	if r.readErr != nil {
		err := r.readErr
		r.mu.Unlock()
		return err
	}
	id := r.nextID
	r.nextID++
	r.mu.Unlock()
	return r.send(id, body)
}

// call sends body and waits for its reply. An ErrorResponse (body or third
// element) becomes a *protocol.APIError.
func (r *rpc) call(ctx context.Context, body protocol.Body) (protocol.Message, error) {
	// A cancelled caller sends nothing: otherwise whether its request took
	// effect would depend on which of two ready channels select picks.
	if err := ctx.Err(); err != nil {
		return protocol.Message{}, fmt.Errorf("%s not sent: %w", body.MessageType(), err)
	}
	ch := make(chan protocol.Message, 1)
	r.mu.Lock()
	if r.readErr != nil {
		err := r.readErr
		r.mu.Unlock()
		return protocol.Message{}, err
	}
	id := r.nextID
	r.nextID++
	r.pending[id] = ch
	r.mu.Unlock()
	forget := func() {
		r.mu.Lock()
		delete(r.pending, id)
		r.mu.Unlock()
	}
	if err := r.send(id, body); err != nil {
		forget()
		return protocol.Message{}, fmt.Errorf("sending %s: %w", body.MessageType(), err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			r.mu.Lock()
			err := r.readErr
			r.mu.Unlock()
			return protocol.Message{}, fmt.Errorf("waiting for the reply to %s: %w", body.MessageType(), err)
		}
		if e := m.ErrorResponse(); e != nil {
			return m, e
		}
		return m, nil
	case <-ctx.Done():
		forget()
		// A broken comm socket cancels the task too; then both cases are
		// ready, and the broken socket is the cause worth reporting.
		if err := r.failure(); err != nil {
			return protocol.Message{}, fmt.Errorf("waiting for the reply to %s: %w", body.MessageType(), err)
		}
		return protocol.Message{}, ctx.Err()
	}
}

// client is the runtime's implementation of Client.
type client struct {
	rpc       *rpc
	ti        TaskInstance
	lookupEnv func(string) (string, bool)
	// secrets are the log sink's: what the task learns that Airflow masks
	// (connection passwords and extras, variables under secret names,
	// what it asks to mask) is masked wherever its values go (secrets.go).
	secrets *redact.Set
	// names says which names' values are secrets, as Airflow's masker does.
	names redact.Names
	// state is the running task's (rendered map index, outlets); set
	// before the task function is called.
	state *runState
}

var _ Client = (*client)(nil)

// checkReply makes sure a reply is the result that was asked for, so a
// supervisor that answers with something else is an error naming it, not a
// silent "not found". A body without "type" is taken as the expected one:
// Airflow dumps some results with exclude_unset.
func checkReply(m protocol.Message, want string) error {
	if m.Body == nil {
		return fmt.Errorf("the supervisor sent an empty reply, want %s (is it speaking this protocol version?)", want)
	}
	if t := m.Type(); t != "" && t != want {
		return fmt.Errorf("the supervisor answered %q, want %s", t, want)
	}
	return nil
}

func apiCode(err error) string {
	var ae *protocol.APIError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

func (c *client) GetConnection(ctx context.Context, connID string) (connections.Connection, error) {
	m, err := c.rpc.call(ctx, &protocol.GetConnection{ConnID: connID})
	if err != nil {
		if apiCode(err) == "CONNECTION_NOT_FOUND" {
			return connections.Connection{}, fmt.Errorf("connection %q: %w (define it in Airflow: the UI, `airflow connections add`, or AIRFLOW_CONN_%s in the api-server's environment, which answers task lookups on Airflow 3.3; under airflow-go-worker run, --connections)", connID, ErrConnectionNotFound, strings.ToUpper(connID))
		}
		return connections.Connection{}, fmt.Errorf("getting connection %q: %w", connID, err)
	}
	if err := checkReply(m, protocol.TypeConnectionResult); err != nil {
		return connections.Connection{}, fmt.Errorf("getting connection %q: %w", connID, err)
	}
	conn, err := connectionFromResult(connID, m.Body)
	if err == nil {
		c.maskConnection(conn)
	}
	return conn, err
}

// connectionFromResult reads a ConnectionResult, where absent keys mean null
// and extra is a JSON string (a map is accepted and re-encoded).
func connectionFromResult(connID string, b map[string]any) (connections.Connection, error) {
	str := func(k string) (string, error) {
		switch v := b[k].(type) {
		case nil:
			return "", nil
		case string:
			return v, nil
		}
		return "", fmt.Errorf("connection %q: ConnectionResult.%s is not a string", connID, k)
	}
	var c connections.Connection
	var err error
	fields := []struct {
		k   string
		dst *string
	}{{"conn_id", &c.ConnID}, {"conn_type", &c.ConnType}, {"host", &c.Host}, {"schema", &c.Schema}, {"login", &c.Login}, {"password", &c.Password}}
	for _, f := range fields {
		if *f.dst, err = str(f.k); err != nil {
			return connections.Connection{}, err
		}
	}
	if c.ConnID == "" {
		c.ConnID = connID
	}
	switch v := b["port"].(type) {
	case nil:
	case string:
		if _, err := fmt.Sscanf(v, "%d", &c.Port); err != nil {
			return connections.Connection{}, fmt.Errorf("connection %q: port %q is not a number", connID, v)
		}
	default:
		f, ok := toFloat(v)
		if !ok {
			return connections.Connection{}, fmt.Errorf("connection %q: port is not a number", connID)
		}
		c.Port = int(f)
	}
	switch v := b["extra"].(type) {
	case nil:
	case string:
		c.Extra = v
	default:
		data, err := json.Marshal(jsonValue(v))
		if err != nil {
			return connections.Connection{}, fmt.Errorf("connection %q: extra is not JSON: %v", connID, err)
		}
		c.Extra = string(data)
	}
	return c, nil
}

func toFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case uint64:
		return float64(n), true
	case float64:
		return n, true
	case int:
		return float64(n), true
	}
	return 0, false
}

// envVarName is Airflow's AIRFLOW_VAR_<KEY> spelling.
func envVarName(key string) string { return "AIRFLOW_VAR_" + strings.ToUpper(key) }

func (c *client) GetVariable(ctx context.Context, key string) (string, error) {
	// Set, even to "", wins: Airflow's environment backend and its Go SDK
	// both take an empty AIRFLOW_VAR_ as the value "".
	if v, ok := c.lookupEnv(envVarName(key)); ok {
		c.maskVariable(key, v)
		return v, nil
	}
	m, err := c.rpc.call(ctx, &protocol.GetVariable{Key: key})
	if err != nil {
		if apiCode(err) == "VARIABLE_NOT_FOUND" {
			return "", fmt.Errorf("variable %q: %w (define it in Airflow or as %s)", key, ErrVariableNotFound, envVarName(key))
		}
		return "", fmt.Errorf("getting variable %q: %w", key, err)
	}
	if err := checkReply(m, protocol.TypeVariableResult); err != nil {
		return "", fmt.Errorf("getting variable %q: %w", key, err)
	}
	switch v := m.Body["value"].(type) {
	case string:
		c.maskVariable(key, v)
		return v, nil
	case nil:
		return "", fmt.Errorf("variable %q: %w", key, ErrVariableNotFound)
	default:
		data, _ := json.Marshal(jsonValue(v))
		c.maskVariable(key, string(data))
		return string(data), nil
	}
}

// xcomTarget names ref's XCom, the current task instance filling in what
// ref leaves out.
func (c *client) xcomTarget(ref XComRef) protocol.XComTarget {
	t := protocol.XComTarget{Key: ref.Key, DagID: ref.DagID, RunID: ref.RunID, TaskID: ref.TaskID}
	if t.DagID == "" {
		t.DagID = c.ti.DagID
	}
	if t.RunID == "" {
		t.RunID = c.ti.RunID
	}
	if t.TaskID == "" {
		t.TaskID = c.ti.TaskID
	}
	if ref.MapIndex != nil && *ref.MapIndex >= 0 {
		mi := *ref.MapIndex
		t.MapIndex = &mi
	}
	return t
}

func (c *client) GetXCom(ctx context.Context, ref XComRef) (any, error) {
	if ref.Key == "" {
		ref.Key = protocol.ReturnValueKey
	}
	target := c.xcomTarget(ref)
	m, err := c.rpc.call(ctx, &protocol.GetXCom{XComTarget: target})
	name := fmt.Sprintf("XCom %s of task %s", target.Key, target.TaskID)
	if err != nil {
		if apiCode(err) == "XCOM_NOT_FOUND" {
			return nil, fmt.Errorf("%s: %w", name, ErrXComNotFound)
		}
		return nil, fmt.Errorf("getting %s: %w", name, err)
	}
	if err := checkReply(m, protocol.TypeXComResult); err != nil {
		return nil, fmt.Errorf("getting %s: %w", name, err)
	}
	v, ok := m.Body["value"]
	if !ok || v == nil {
		return nil, fmt.Errorf("%s: %w", name, ErrXComNotFound)
	}
	return jsonValue(v), nil
}

func (c *client) SetXCom(ctx context.Context, key string, value any) error {
	return c.setXCom(ctx, key, value, false)
}

// setXCom pushes value; withLength adds its length as mapped_length, for
// a list a mapped downstream task expands over.
func (c *client) setXCom(ctx context.Context, key string, value any, withLength bool) error {
	v, err := toJSONValue(value)
	if err != nil {
		return fmt.Errorf("XCom %q: value is not JSON-encodable: %w", key, err)
	}
	v = c.secrets.Any(v)
	mi := c.ti.MapIndex
	msg := &protocol.SetXCom{XComTarget: c.xcomTarget(XComRef{Key: key, MapIndex: &mi}), Value: v}
	if withLength {
		list, ok := v.([]any)
		if !ok {
			return FailNoRetry(fmt.Errorf("XCom %q: a mapped task expands over this task's return value, so it must be a list, not %s (return a slice)", key, jsonKindOf(v)))
		}
		n := len(list)
		msg.MappedLength = &n
	}
	if _, err := c.rpc.call(ctx, msg); err != nil {
		return fmt.Errorf("setting XCom %q: %w", key, err)
	}
	return nil
}

func (c *client) GetMappedXComs(ctx context.Context, taskID, key string) ([]any, error) {
	if key == "" {
		key = protocol.ReturnValueKey
	}
	m, err := c.rpc.call(ctx, &protocol.GetXComSequenceSlice{Key: key, DagID: c.ti.DagID, RunID: c.ti.RunID, TaskID: taskID})
	name := fmt.Sprintf("the %s XComs of mapped task %s", key, taskID)
	if err != nil {
		return nil, fmt.Errorf("getting %s: %w", name, err)
	}
	if err := checkReply(m, protocol.TypeXComSequenceSliceResult); err != nil {
		return nil, fmt.Errorf("getting %s: %w", name, err)
	}
	switch root := m.Body["root"].(type) {
	case []any:
		return jsonValue(root).([]any), nil
	case nil:
		return []any{}, nil
	default:
		return nil, fmt.Errorf("getting %s: the reply's root is a %T, not a list", name, root)
	}
}

func (c *client) GetAssetEvents(ctx context.Context, asset Asset, limit int) ([]AssetEvent, error) {
	if asset.Name == "" && asset.URI == "" {
		return nil, FailNoRetry(errors.New("GetAssetEvents: name the asset (its name, its URI, or both)"))
	}
	req := &protocol.GetAssetEventByAsset{Ascending: true}
	if asset.Name != "" {
		req.Name = &asset.Name
	}
	if asset.URI != "" {
		req.URI = &asset.URI
	}
	if limit > 0 {
		// The latest limit events: newest first from Airflow, then
		// turned oldest first like every other list of events here.
		req.Limit, req.Ascending = &limit, false
	}
	m, err := c.rpc.call(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("getting the events of asset %s: %w", asset, err)
	}
	if err := checkReply(m, protocol.TypeAssetEventsResult); err != nil {
		return nil, fmt.Errorf("getting the events of asset %s: %w", asset, err)
	}
	events, err := protocol.ParseAssetEvents(m.Body["asset_events"], "AssetEventsResult.asset_events")
	if err != nil {
		return nil, fmt.Errorf("getting the events of asset %s: %w", asset, err)
	}
	jsonEvents(events)
	return events, nil
}

func (c *client) SetRenderedMapIndex(ctx context.Context, name string) error {
	if c.state == nil {
		return errors.New("SetRenderedMapIndex: the client belongs to no running task")
	}
	return c.state.setMapIndex(ctx, c.maskText(name))
}

func (c *client) MaskSecret(ctx context.Context, value, name string) error {
	c.secrets.Add(value)
	if _, err := c.rpc.call(ctx, &protocol.MaskSecret{Value: value, Name: name}); err != nil {
		return fmt.Errorf("masking secret %q: %w", name, err)
	}
	return nil
}

// GetDagRunState asks for a Dag run's state. Airflow's supervisor relays
// it to the Execution API; a run Airflow does not have comes back as an
// API_SERVER_ERROR whose status_code is 404.
func (c *client) GetDagRunState(ctx context.Context, dagID, runID string) (string, error) {
	m, err := c.rpc.call(ctx, &protocol.GetDagRunState{DagID: dagID, RunID: runID})
	name := fmt.Sprintf("Dag run %s/%s", dagID, runID)
	if err != nil {
		if statusCode(err) == 404 {
			return "", fmt.Errorf("%s: %w", name, ErrDagRunNotFound)
		}
		return "", fmt.Errorf("getting the state of %s: %w", name, err)
	}
	if err := checkReply(m, protocol.TypeDagRunStateResult); err != nil {
		return "", fmt.Errorf("getting the state of %s: %w", name, err)
	}
	state, _ := m.Body["state"].(string)
	if state == "" {
		return "", fmt.Errorf("getting the state of %s: the reply has no state", name)
	}
	return state, nil
}

// statusCode is the HTTP status an ErrorResponse's detail carries (Airflow's
// supervisor puts the Execution API's there), or 0.
func statusCode(err error) int {
	var ae *protocol.APIError
	if !errors.As(err, &ae) {
		return 0
	}
	d, _ := ae.Detail.(map[string]any)
	n, _ := toFloat(d["status_code"])
	return int(n)
}

// toJSONValue turns any Go value into the plain JSON shapes (map[string]any,
// []any, string, float64/int64, bool, nil) that travel as XCom, honouring
// json tags and MarshalJSON. Integers that fit stay integers.
func toJSONValue(v any) (any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return numbersToGo(out), nil
}

func numbersToGo(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = numbersToGo(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbersToGo(e)
		}
	}
	return v
}

// jsonValue normalises values decoded from msgpack (timestamps, byte
// strings, narrow ints) into JSON-friendly ones.
func jsonValue(v any) any {
	switch x := v.(type) {
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case []byte:
		return string(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonValue(e)
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[fmt.Sprint(k)] = jsonValue(e)
		}
		return out
	}
	return v
}
