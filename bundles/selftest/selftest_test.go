package selftest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/taskinfo"
	"github.com/airflow-sandbox/airflow-go-worker/connections"
)

// fakeClient is an in-memory bundles.Client.
type fakeClient struct {
	vars   map[string]string
	conns  map[string]connections.Connection
	xcoms  map[string]any
	masked []string
}

func (f *fakeClient) GetConnection(_ context.Context, id string) (connections.Connection, error) {
	c, ok := f.conns[id]
	if !ok {
		return c, fmt.Errorf("connection %q: %w", id, bundles.ErrConnectionNotFound)
	}
	return c, nil
}
func (f *fakeClient) GetVariable(_ context.Context, key string) (string, error) {
	if v, ok := f.vars[key]; ok {
		return v, nil
	}
	return "", fmt.Errorf("variable %q: %w", key, bundles.ErrVariableNotFound)
}
func (f *fakeClient) GetXCom(_ context.Context, ref bundles.XComRef) (any, error) {
	v, ok := f.xcoms[ref.TaskID+"/"+ref.Key]
	if !ok {
		return nil, bundles.ErrXComNotFound
	}
	return v, nil
}
func (f *fakeClient) GetMappedXComs(context.Context, string, string) ([]any, error) {
	return nil, bundles.ErrXComNotFound // the selftest reads no mapped XComs
}
func (f *fakeClient) GetAssetEvents(context.Context, bundles.Asset, int) ([]bundles.AssetEvent, error) {
	return nil, errors.New("the self-test reads no asset events")
}
func (f *fakeClient) SetRenderedMapIndex(context.Context, string) error {
	return errors.New("the selftest names no map index")
}
func (f *fakeClient) SetXCom(_ context.Context, key string, v any) error {
	f.xcoms["xcom_roundtrip/"+key] = v
	return nil
}
func (f *fakeClient) MaskSecret(_ context.Context, v, _ string) error {
	f.masked = append(f.masked, v)
	return nil
}
func (f *fakeClient) GetDagRunState(context.Context, string, string) (string, error) {
	return "", bundles.ErrDagRunNotFound
}

func TestConnectionNeverReturnsThePassword(t *testing.T) {
	c := &fakeClient{conns: map[string]connections.Connection{"db": {ConnID: "db", ConnType: "postgres", Host: "h", Port: 5432, Login: "u", Password: "pw-123", Extra: "{}"}}}
	r, err := Connection(context.Background(), c, hclog.NewNullLogger(), ConnectionInput{ConnID: "db"})
	if err != nil {
		t.Fatal(err)
	}
	if r.ConnType != "postgres" || r.Port != 5432 || r.Login != "u" || !slices.Equal(r.FieldsSet, []string{"conn_type", "host", "login", "password", "port", "extra"}) {
		t.Fatalf("%+v", r)
	}
	if strings.Contains(fmt.Sprintf("%+v", r), "pw-123") || !slices.Equal(c.masked, []string{"pw-123"}) {
		t.Fatalf("password must be masked and never returned: %+v masked=%v", r, c.masked)
	}
	if _, err := Connection(context.Background(), c, hclog.NewNullLogger(), ConnectionInput{ConnID: "nope"}); !errors.Is(err, bundles.ErrConnectionNotFound) {
		t.Fatalf("missing connection: %v", err)
	}
	if _, err := Connection(context.Background(), c, hclog.NewNullLogger(), ConnectionInput{}); err == nil || !strings.Contains(err.Error(), "conn_id is required") {
		t.Fatalf("empty conn_id: %v", err)
	}
}

// Issue 19, hole 5: the host came back as is, https://usr:pw@example.com/
// ?token=... to whoever triggered the run, and in the task log.
func TestConnectionRedactsTheHost(t *testing.T) {
	host := "https://usr:pw-456@example.com/?token=tok-789"
	c := &fakeClient{conns: map[string]connections.Connection{"api": {ConnID: "api", ConnType: "http", Host: host}}}
	var log bytes.Buffer
	r, err := Connection(context.Background(), c, hclog.New(&hclog.LoggerOptions{Output: &log}), ConnectionInput{ConnID: "api"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Host != "https://***@example.com/?token=***" {
		t.Errorf("host returned as %q", r.Host)
	}
	if !strings.Contains(log.String(), "connection resolved") {
		t.Fatalf("the connection was not logged, so the log proves nothing:\n%s", log.String())
	}
	for _, secret := range []string{"usr", "pw-456", "tok-789"} {
		if strings.Contains(fmt.Sprintf("%+v", r)+log.String(), secret) {
			t.Errorf("%q reached the result or the log: %+v\n%s", secret, r, log.String())
		}
	}
}

// Issue 29, item 5: secrets a host carries in a path token, a bare query
// key or ";" parameters came back and were logged.
func TestConnectionRedactsHostPathQueryKeysAndParameters(t *testing.T) {
	for host, want := range map[string]string{
		"https://hooks.example.com/services/T0/B0/tok-path-1": "https://hooks.example.com/***",
		"https://api.example.com/?tok-key-2":                  "https://api.example.com/?***",
		"sqlserver://db:1433;user=sa;password=tok-param-3":    "sqlserver://db:1433;user=***;password=***",
		"db.example.com;tok-param-4":                          "db.example.com;***",
	} {
		c := &fakeClient{conns: map[string]connections.Connection{"api": {ConnID: "api", ConnType: "http", Host: host}}}
		var log bytes.Buffer
		r, err := Connection(context.Background(), c, hclog.New(&hclog.LoggerOptions{Output: &log}), ConnectionInput{ConnID: "api"})
		if err != nil {
			t.Fatal(err)
		}
		if r.Host != want {
			t.Errorf("host %q returned as %q, want %q", host, r.Host, want)
		}
		if !strings.Contains(log.String(), "connection resolved") || !strings.Contains(log.String(), want) {
			t.Fatalf("the connection's host was not logged, so the log proves nothing:\n%s", log.String())
		}
		if shown := fmt.Sprintf("%+v", r) + log.String(); strings.Contains(shown, "tok-") {
			t.Errorf("a secret of %q reached the result or the log: %+v\n%s", host, r, log.String())
		}
	}
}

func TestXComRoundTripAndSleepCancellation(t *testing.T) {
	c := &fakeClient{xcoms: map[string]any{}}
	got, err := XComRoundTrip(context.Background(), c, bundles.TaskInstance{TaskID: "xcom_roundtrip"}, XComInput{Key: "k", Value: 7})
	if err != nil || got != 7 {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := XComRoundTrip(context.Background(), c, bundles.TaskInstance{}, XComInput{Key: protocol.ReturnValueKey}); err == nil {
		t.Fatal("return_value must be refused as a key")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// A sleep that ignored the cancellation would outlast go test's -timeout.
	if _, err := Sleep(ctx, hclog.NewNullLogger(), SleepInput{Seconds: 3600}); !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	if err := Fail(hclog.NewNullLogger()); !errors.Is(err, ErrDeliberate) {
		t.Fatal(err)
	}
}

func TestRegisterOrder(t *testing.T) {
	b := bundles.New()
	Register(b)
	var ids []string
	for _, t := range taskinfo.Describe(b) {
		ids = append(ids, t.TaskID)
	}
	if strings.Join(ids, ",") != "ping,connection,xcom_roundtrip,variable,fail,sleep" {
		t.Fatal(ids)
	}
}

// variable reports whether a variable exists and its length, never its
// value; a missing one is an answer, not a failure.
func TestVariableNeverReturnsTheValue(t *testing.T) {
	c := &fakeClient{vars: map[string]string{"api_token": "tok-98765"}}
	r, err := Variable(context.Background(), c, hclog.NewNullLogger(), VariableInput{Key: "api_token"})
	if err != nil || r != (VariableResult{Key: "api_token", Found: true, Length: 9}) {
		t.Fatalf("%+v %v", r, err)
	}
	r, err = Variable(context.Background(), c, hclog.NewNullLogger(), VariableInput{Key: "missing"})
	if err != nil || r != (VariableResult{Key: "missing"}) {
		t.Fatalf("a missing variable: %+v %v", r, err)
	}
	if _, err := Variable(context.Background(), c, hclog.NewNullLogger(), VariableInput{}); err == nil {
		t.Fatal("an empty key must fail")
	}
}
