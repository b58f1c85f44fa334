package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

func decodeInput[T any](t *testing.T, js string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(js), &v); err != nil {
		t.Fatalf("decoding input %s: %v", js, err)
	}
	return v
}

func TestProvisionStampsOwnershipStagesInputsAndPushesRecord(t *testing.T) {
	e := newEnv(t)
	const secret = "tok-very-secret-123"
	e.af.conns["svc"] = connections.Connection{ConnID: "svc", ConnType: "http", Login: "bob", Password: secret, Extra: `{"region": "eu"}`}
	e.af.vars["greeting"] = "hello"
	e.st.objects["s3://in/data.csv"] = []byte("a,b\n1,2\n")

	in := decodeInput[ProvisionInput](t, `{
		"lifetime": "90m", "workdir": "/work",
		"env": {"PLAIN": "1"},
		"env_from": {"TOKEN": {"connection": "svc"}, "USER": {"connection": "svc", "field": "login"},
		             "REGION": {"connection": "svc", "field": "extra.region"}, "GREETING": {"variable": "greeting"}},
		"tags": {"team": "data"},
		"stage_in": {"inputs/data.csv": "s3://in/data.csv"}
	}`)
	before := time.Now()
	id, err := Provision(context.Background(), e.deps, in)
	if err != nil {
		t.Fatal(err)
	}
	if alive := e.drv.alive(); len(alive) != 1 || alive[0] != id {
		t.Fatalf("want exactly sandbox %s alive, got %v", id, alive)
	}
	tags, _ := e.drv.Tags(context.Background(), id)
	name, host, _ := strings.Cut(id, "@") // a local sandbox's id names its host
	want := map[string]string{
		sandbox.TagOwner:     "dag_a/manual__2026-11-29T10:00:00+00:00",
		sandbox.TagNetwork:   `{"allow_egress_to":[],"allow_egress_to_cidrs":[],"block_network":true}`,
		sandbox.TagWorkdir:   "/work",
		sandbox.TagSandbox:   name,
		sandbox.TagCreatedBy: sandbox.CreatedByValue,
		sandbox.TagHost:      host,
		"team":               "data",
	}
	for k, v := range want {
		if tags[k] != v {
			t.Errorf("tag %s = %q, want %q", k, tags[k], v)
		}
	}
	exp := sandbox.ExpiresAt(tags)
	if d := exp.Sub(before); d < 89*time.Minute || d > 91*time.Minute {
		t.Errorf("airflow_expires_at is %v after start, want about 90m", d)
	}
	spec := e.drv.creates[0]
	wantEnv := map[string]string{"PLAIN": "1", "TOKEN": secret, "USER": "bob", "REGION": "eu", "GREETING": "hello"}
	for k, v := range wantEnv {
		if spec.Env[k] != v {
			t.Errorf("sandbox env %s = %q, want %q", k, spec.Env[k], v)
		}
	}
	if len(e.af.masked) != 4 {
		t.Errorf("masked %d values, want the four env_from values", len(e.af.masked))
	}
	for _, v := range []string{secret, "bob", "eu", "hello"} {
		found := false
		for _, m := range e.af.masked {
			found = found || m == v
		}
		if !found {
			t.Errorf("env_from value %q was not masked", v)
		}
	}
	got, err := os.ReadFile(e.drv.host(id, "/work/inputs/data.csv"))
	if err != nil || string(got) != "a,b\n1,2\n" {
		t.Errorf("staged input = %q, %v", got, err)
	}
	rec, ok := e.af.xcoms[RecordXComKey].(Record)
	if !ok {
		t.Fatalf("xcom %q = %#v, want a Record", RecordXComKey, e.af.xcoms[RecordXComKey])
	}
	if rec.ID != id || rec.Backend != "local" || rec.Workdir != "/work" || rec.Owner != tags[sandbox.TagOwner] || rec.Name != name || rec.Host == "" || rec.Host != host {
		t.Errorf("record %+v does not describe the sandbox", rec)
	}
	if ts, err := time.Parse(time.RFC3339, rec.ExpiresAt); err != nil || !ts.Equal(exp) {
		t.Errorf("record expires_at %q, want %v", rec.ExpiresAt, exp)
	}
	js, _ := json.Marshal(rec)
	if strings.Contains(string(js), secret) || strings.Contains(e.log.String(), secret) {
		t.Errorf("secret leaked into the record or the log: %s", js)
	}
}

// A stage_in object that is missing, or a bucket that does not exist,
// fails before a sandbox is created.
func TestProvisionChecksStageInBeforeCreating(t *testing.T) {
	e := newEnv(t)
	e.st.noBucket["s3://nobucket"] = true
	for _, url := range []string{"s3://in/missing.txt", "s3://nobucket/a"} {
		_, err := Provision(context.Background(), e.deps, ProvisionInput{StageIn: map[string]string{"a.txt": url}})
		if err == nil || !strings.Contains(err.Error(), "stage_in") || !strings.Contains(err.Error(), url) {
			t.Fatalf("%s: want an error naming stage_in and the URL, got %v", url, err)
		}
	}
	if len(e.drv.creates) != 0 {
		t.Fatalf("%d sandboxes were created for inputs that could not be staged", len(e.drv.creates))
	}
}

func TestProvisionDestroysTheSandboxWhenStagingFails(t *testing.T) {
	e := newEnv(t)
	e.st.objects["s3://in/missing.txt"] = []byte("there at the check")
	e.st.failOpen["s3://in/missing.txt"] = errors.New("missing.txt: connection reset")
	in := ProvisionInput{StageIn: map[string]string{"a.txt": "s3://in/missing.txt"}}
	_, err := Provision(context.Background(), e.deps, in)
	if err == nil || !strings.Contains(err.Error(), "missing.txt") || !strings.Contains(err.Error(), "destroyed") {
		t.Fatalf("want an error naming the input and saying the sandbox was destroyed, got %v", err)
	}
	if len(e.drv.creates) != 1 {
		t.Fatalf("the sandbox should have been created once, got %d", len(e.drv.creates))
	}
	if alive := e.drv.alive(); len(alive) != 0 {
		t.Fatalf("sandboxes left alive: %v", alive)
	}
	if _, ok := e.af.xcoms[RecordXComKey]; ok {
		t.Error("a record was pushed for a sandbox that no longer exists")
	}
}

func TestProvisionRefusesBadInputBeforeCreating(t *testing.T) {
	cases := []struct {
		name, input string
		want        []string
	}{
		{"unknown backend", `{"backend": "docker"}`, []string{`"docker"`, "local, modal, opensandbox"}},
		{"gpu on local", `{"gpu": "T4"}`, []string{"gpu", "local", "modal"}},
		{"gpu on opensandbox", `{"backend": "opensandbox", "gpu": "T4"}`, []string{"gpu", "opensandbox"}},
		{"stage_in not a URL", `{"stage_in": {"a": "/tmp/a"}}`, []string{"stage_in", "storage URL"}},
		{"env_from without source", `{"env_from": {"X": {}}}`, []string{"env_from.X"}},
		{"env_from both sources", `{"env_from": {"X": {"connection": "c", "variable": "v"}}}`, []string{"env_from.X", "not both"}},
		{"env_from missing connection", `{"env_from": {"X": {"connection": "nope"}}}`, []string{"env_from.X", `"nope"`, "does not exist"}},
		{"env_from bad field", `{"env_from": {"X": {"connection": "svc", "field": "token"}}}`, []string{"env_from.X", `"token"`}},
		{"env_from empty field", `{"env_from": {"X": {"connection": "svc", "field": "host"}}}`, []string{"env_from.X", "host", "empty"}},
		{"env and env_from clash", `{"env": {"X": "1"}, "env_from": {"X": {"variable": "v"}}}`, []string{"env_from.X", "also set in env"}},
		{"open network with allowlist", `{"network": {"block": false, "allow_hosts": ["pypi.org"]}}`, []string{"network"}},
		{"lifetime too long", `{"lifetime": "48h"}`, []string{"lifetime: 48h0m0s", "at most 24h"}},
		{"missing storage conn", `{"storage_conn_id": "s3x"}`, []string{"storage_conn_id", `"s3x"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.af.conns["svc"] = connections.Connection{ConnID: "svc", Password: "p"}
			// The backend opens before Create refuses the spec.
			e.af.conns["opensandbox_default"] = connections.Connection{ConnID: "opensandbox_default", Host: "os.example"}
			e.af.vars["v"] = "1"
			_, err := Provision(context.Background(), e.deps, decodeInput[ProvisionInput](t, c.input))
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if len(e.drv.creates) != 0 {
				t.Error("a sandbox was created for bad input")
			}
		})
	}
}

func TestBackendConnectionResolution(t *testing.T) {
	modalConn := connections.Connection{ConnID: "modal_default", ConnType: "modal", Login: "ak-1", Password: "as-1"}
	cases := []struct {
		name     string
		conns    []connections.Connection
		opts     BackendOptions
		wantConn string // "" = no connection (env credentials)
		wantErr  string
	}{
		{"modal default present", []connections.Connection{modalConn}, BackendOptions{Backend: "modal"}, "modal_default", ""},
		{"modal default missing falls back to env", nil, BackendOptions{Backend: "modal"}, "", ""},
		{"modal other id missing is an error", nil, BackendOptions{Backend: "modal", ConnID: "modal_prod"}, "", `"modal_prod"`},
		{"opensandbox default missing is an error", nil, BackendOptions{Backend: "OpenSandbox"}, "", `"opensandbox_default"`},
		{"opensandbox explicit", []connections.Connection{{ConnID: "osb", Host: "h"}}, BackendOptions{Backend: "opensandbox", ConnID: "osb"}, "osb", ""},
		{"local has none", nil, BackendOptions{}, "", ""},
		{"local ignores conn_id and modal's options", nil, BackendOptions{ConnID: "modal_default", Options: map[string]json.RawMessage{"modal": json.RawMessage(`{"flag": "x"}`)}}, "", ""},
		{"unknown backend names the linked ones", nil, BackendOptions{Backend: "kubernetes"}, "", `backend "kubernetes" is not one this bundle links (local, modal, opensandbox)`},
		{"a misspelt option of the chosen backend", nil, BackendOptions{Backend: "modal", Options: map[string]json.RawMessage{"modal": json.RawMessage(`{"flga": "x"}`)}}, "", `backend_options.modal: unknown option "flga"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			for _, cn := range c.conns {
				e.af.conns[cn.ConnID] = cn
			}
			req, err := resolveBackendRequest(context.Background(), e.deps, c.opts)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("want error mentioning %s, got %v", c.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if req.ConnID != c.wantConn || (req.Conn == nil) != (c.wantConn == "") {
				t.Fatalf("resolved connection %q (conn %v), want %q", req.ConnID, req.Conn, c.wantConn)
			}
		})
	}
}

func TestProvisionFailsWhenTheConnectionLookupFails(t *testing.T) {
	e := newEnv(t)
	e.deps.Airflow = brokenAirflow{e.af}
	_, err := Provision(context.Background(), e.deps, ProvisionInput{BackendOptions: BackendOptions{Backend: "modal"}})
	if err == nil || !strings.Contains(err.Error(), "supervisor unreachable") || errors.Is(err, connections.ErrNotFound) {
		t.Fatalf("a failed lookup must not be mistaken for a missing connection: %v", err)
	}
}

type brokenAirflow struct{ *fakeAirflow }

func (brokenAirflow) GetConnection(context.Context, string) (connections.Connection, error) {
	return connections.Connection{}, errors.New("supervisor unreachable")
}

// Only the chosen backend's options reach it, and a conn_id on a backend
// that takes none is logged as ignored.
func TestOnlyTheChosenBackendsOptionsApply(t *testing.T) {
	e := newEnv(t)
	opts := BackendOptions{Backend: "local", ConnID: "modal_default", Options: map[string]json.RawMessage{
		"local": json.RawMessage(`{"flag": "mine"}`), "modal": json.RawMessage(`{"flag": "other"}`)}}
	req, err := resolveBackendRequest(context.Background(), e.deps, opts)
	if err != nil {
		t.Fatal(err)
	}
	if string(req.Options) != `{"flag": "mine"}` || req.ConnID != "" || req.Conn != nil {
		t.Fatalf("request for the local backend: options %s, conn %q", req.Options, req.ConnID)
	}
	if !strings.Contains(e.log.String(), "ignoring conn_id") {
		t.Fatalf("the ignored conn_id was not logged:\n%s", e.log.String())
	}
}

// A spec the chosen backend cannot honour is refused in one place, the
// portable layer's Create, before anything is provisioned, naming the
// field, the backend and the ones that could. (A bundle config's defaults
// are refused when it loads; a value a run bound meets this refusal after
// env_from is read, its value masked first and passed nowhere.)
func TestProvisionRefusesWhatTheBackendCannotDo(t *testing.T) {
	e := newEnv(t)
	e.af.vars["v"] = "secret-value"
	_, err := Provision(context.Background(), e.deps, ProvisionInput{GPU: "A10G", EnvFrom: map[string]EnvSource{"V": {Variable: "v"}}})
	if !errors.Is(err, sandbox.ErrRefused) || !strings.Contains(err.Error(), "gpu: the local backend cannot provide GPUs, which modal can") {
		t.Fatalf("want a refusal naming gpu, local and the able backends, got %v", err)
	}
	if len(e.drv.creates) != 0 {
		t.Fatalf("a refused provision created %d sandboxes", len(e.drv.creates))
	}
	if len(e.af.masked) != 1 || strings.Contains(err.Error(), "secret-value") || strings.Contains(e.log.String(), "secret-value") {
		t.Fatalf("the env_from value read before the refusal must be masked (%d masked) and shown nowhere: %v", len(e.af.masked), err)
	}
	if _, err := Provision(context.Background(), e.deps, ProvisionInput{GPU: "A10G", BackendOptions: BackendOptions{Backend: "modal"}}); err != nil {
		t.Fatalf("gpu on a backend with GPUs: %v", err)
	}
	// Network refusals name the backends that could too (Has covers them).
	_, err = Provision(context.Background(), e.deps, ProvisionInput{Network: sandbox.NetworkPolicy{AllowHosts: []string{"pypi.org"}}})
	if !errors.Is(err, sandbox.ErrRefused) || !strings.Contains(err.Error(), "network.allow_hosts: the local backend cannot provide host allowlists, which modal and opensandbox can") {
		t.Fatalf("want a refusal naming allow_hosts, local and the able backends, got %v", err)
	}
}

func TestProvisionSaysWhenTheCleanupDestroyFailed(t *testing.T) {
	e := newEnv(t)
	e.drv.failDestroy = errors.New("api down")
	e.st.objects["s3://in/missing"] = []byte("there at the check")
	e.st.failOpen["s3://in/missing"] = errors.New("gone meanwhile")
	_, err := Provision(context.Background(), e.deps, ProvisionInput{StageIn: map[string]string{"a": "s3://in/missing"}})
	if err == nil || !strings.Contains(err.Error(), "could not be destroyed") || !strings.Contains(err.Error(), "api down") || strings.Contains(err.Error(), "was destroyed") {
		t.Fatalf("the error must say the sandbox is still there: %v", err)
	}
}

// Issue 19, hole 6: a tags input (which the author may let a Dag run set
// through conf) accepted reserved airflow_* names beyond the two env_from
// ones, so a run could stamp tags sweep, attach and the Python provider
// trust (a provider's own metadata, a future reserved name).
func TestProvisionRefusesReservedTagNames(t *testing.T) {
	e := newEnv(t)
	for _, k := range []string{"airflow_owner", "airflow_holder", "airflow_expires_at", "airflow_env_from", "airflow_provider_note", "airflow_"} {
		_, err := Provision(context.Background(), e.deps, decodeInput[ProvisionInput](t, `{"tags": {"team": "a", "`+k+`": "x"}}`))
		if err == nil || !strings.Contains(err.Error(), "tags: "+k+": names starting with airflow_ are reserved") {
			t.Errorf("tags.%s: want a refusal naming it, got %v", k, err)
		}
	}
	if len(e.drv.creates) != 0 {
		t.Fatal("a sandbox was created")
	}
	// Other names still pass.
	if _, err := Provision(context.Background(), e.deps, decodeInput[ProvisionInput](t, `{"tags": {"team": "a", "airflowish": "x"}}`)); err != nil {
		t.Fatalf("an ordinary tag was refused: %v", err)
	}
}
