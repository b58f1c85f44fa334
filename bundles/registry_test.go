package bundles

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/schema"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
	"github.com/airflow-sandbox/airflow-go-worker/internal/exitorder"
)

type dupIn struct {
	ConnID string `json:"conn_id"`
	Connid string
}

func TestAddValidates(t *testing.T) {
	ok := func() error { return nil }
	cases := []struct {
		dag, task string
		fn        any
		opts      []TaskOption
		want      string
	}{
		{"bad dag!", "t", ok, nil, "invalid dag_id"},
		{"d", "", ok, nil, "invalid task_id"},
		{"d", "t", 42, nil, "want a function"},
		{"d", "t", func() {}, nil, "must return error"},
		{"d", "t", func() (int, int) { return 0, 0 }, nil, "second result"},
		{"d", "t", func(...int) error { return nil }, nil, "variadic"},
		{"d", "t", func(int) error { return nil }, nil, "parameter 1 has type int"},
		{"d", "t", func(greetIn, greetOut) error { return nil }, nil, "only one input struct"},
		{"d", "t", func(dupIn) error { return nil }, nil, "same name"},
		{"d", "t", func(greetIn) error { return nil }, []TaskOption{WithDefaults(map[string]any{"nme": 1})}, `default "nme" matches no input field`},
		{"d", "t", func(greetIn) error { return nil }, []TaskOption{WithDefaults(map[string]any{"name": []any{1}})}, `default "name": cannot use`},
		{"d", "t", func(struct {
			Shared
			Level string `json:"level"`
		}) error {
			return nil
		}, nil, "same name"},
		{"d", "t", func(fmtStringer) error { return nil }, nil, "cannot provide"},
		{"d", "t", func(any) error { return nil }, nil, "cannot provide"},
		{"d", "t", func(struct{ x int }) error { return nil }, nil, "no exported fields"},
	}
	for _, tc := range cases {
		err := New().Add(tc.dag, tc.task, tc.fn, tc.opts...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Add(%q,%q,%T): want error containing %q, got %v", tc.dag, tc.task, tc.fn, tc.want, err)
		}
	}
	b := New()
	if err := b.Add("d", "t", ok); err != nil {
		t.Fatal(err)
	}
	if err := b.Add("d", "t", ok); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Fatalf("duplicate: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Register must panic on a bad registration")
		}
	}()
	b.Register("d", "t", ok)
}

type fmtStringer interface{ String() string }

// Shared is a field group task inputs embed.
type Shared struct {
	Level   string `json:"level"`
	Verbose bool   `json:"verbose"`
}

type withShared struct {
	Shared
	Name string `json:"name"`
}

// Embedded structs promote their fields, as with encoding/json, and every
// source (defaults, conf, arguments) binds into them.
func TestEmbeddedFieldsBindByName(t *testing.T) {
	var got withShared
	b := New()
	b.Register("d", "t", func(in withShared) error { got = in; return nil },
		WithDefaults(map[string]any{"level": "info", "name": "n0"}), AllowConf("verbose"))
	if names := b.describe()[0].Inputs; strings.Join(names, ",") != "level,verbose,name" {
		t.Fatalf("input fields = %v, want the embedded fields promoted", names)
	}
	s := runFake(t, b, startupFrame(t, "d", "t", func(sd *protocol.StartupDetails) {
		sd.DagRun.Conf = map[string]any{"verbose": true}
		sd.ArgBindings = []protocol.ArgBinding{{Name: "level", Kind: "literal", Value: "debug"}}
	}), nil, serveConfig{})
	if s.err != nil {
		t.Fatal(s.err)
	}
	want := withShared{Shared: Shared{Level: "debug", Verbose: true}, Name: "n0"}
	if got != want {
		t.Fatalf("bound %+v, want %+v", got, want)
	}
}

func TestManifestAndMetadata(t *testing.T) {
	b := New()
	b.Register("z", "second", func() error { return nil })
	b.Register("a", "x", func() error { return nil })
	b.Register("z", "first", func() error { return nil })
	m := b.manifest("v1.2.3", "")
	if m.SDK.SupervisorSchemaVersion != schema.Default || m.SDK.Language != "go" || m.MetadataVersion != "1.0" {
		t.Fatalf("%+v", m)
	}
	if got := m.Dags["z"].Tasks; len(got) != 2 || got[0] != "second" || got[1] != "first" {
		t.Fatalf("tasks must keep registration order: %v", got)
	}
	var out, errOut bytes.Buffer
	if code := b.Run(context.Background(), []string{"--airflow-metadata"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var y map[string]any
	if err := yaml.Unmarshal(out.Bytes(), &y); err != nil || y["sdk"].(map[string]any)["language"] != "go" {
		t.Fatalf("yaml manifest: %v %v", err, out.String())
	}
	out.Reset()
	if code := b.Run(context.Background(), []string{"--airflow-metadata", "--format", "json"}, &out, &errOut); code != 0 {
		t.Fatal(code)
	}
	var j struct {
		Dags map[string]any `json:"dags"`
	}
	if err := json.Unmarshal(out.Bytes(), &j); err != nil || len(j.Dags) != 2 || !strings.Contains(out.String(), "\n    \"") {
		t.Fatalf("json manifest (4-space indent): %v %s", err, out.String())
	}
}

func TestServeArgs(t *testing.T) {
	a, err := parseServeArgs([]string{"--comm", "127.0.0.1:1", "--logs=127.0.0.1:2"})
	if err != nil || a.Comm != "127.0.0.1:1" || a.Logs != "127.0.0.1:2" {
		t.Fatalf("%+v %v", a, err)
	}
	for args, want := range map[string]string{
		"":                                     "--comm and --logs are required",
		"--comm=x":                             "--comm and --logs are required",
		"--bogus":                              `unknown argument "--bogus"`,
		"--format json":                        "only valid with --airflow-metadata",
		"--airflow-metadata --format toml":     `unknown --format "toml"`,
		"--airflow-metadata --comm=a --logs=b": "cannot be combined",
		"--comm":                               "flag --comm needs a value",
	} {
		_, err := parseServeArgs(strings.Fields(args))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: want %q, got %v", args, want, err)
		}
	}
	var errOut bytes.Buffer
	if code := New().Run(context.Background(), []string{"--nope"}, &bytes.Buffer{}, &errOut); code != exitorder.Usage || !strings.Contains(errOut.String(), "--nope") {
		t.Fatalf("bad flag: exit %d, %q", code, errOut.String())
	}
	// A dial failure is a protocol error: exit 1, no hang.
	if code := New().Run(context.Background(), []string{"--comm=127.0.0.1:1", "--logs=127.0.0.1:1"}, &bytes.Buffer{}, &errOut); code != exitorder.Failure {
		t.Fatalf("dial failure: exit %d", code)
	}
}

func TestLogFilterThreshold(t *testing.T) {
	f, warns := logFilterFromEnv(func(k string) string {
		return map[string]string{"AIRFLOW__LOGGING__LOGGING_LEVEL": "warn", "AIRFLOW__LOGGING__NAMESPACE_LEVELS": "a=DEBUG,a.b=ERROR a.bc=critical"}[k]
	})
	if len(warns) != 0 {
		t.Fatal(warns)
	}
	for name, want := range map[string]int{"x": levelWarning, "a": levelDebug, "a.x": levelDebug, "a.b": levelError, "a.b.c": levelError, "a.bc": levelCritical, "ab": levelWarning} {
		if got := f.Threshold(name); got != want {
			t.Errorf("Threshold(%q) = %d, want %d", name, got, want)
		}
	}
}

// A stub parameter left at its Python default arrives marked from_default:
// it ranks below dag_run.conf but above the bundle defaults, and one that no
// field claims is ignored, so adding a defaulted parameter to a stub never
// breaks the Go task.
func TestStubDefaultsRankBelowConf(t *testing.T) {
	stubDefaults := []protocol.ArgBinding{
		{Name: "level", Kind: "literal", Value: "stub", FromDefault: true},
		{Name: "added_later", Kind: "literal", Value: 1, FromDefault: true},
	}
	for _, tc := range []struct {
		conf map[string]any
		want string
	}{
		{nil, "stub"},
		{map[string]any{"level": "conf"}, "conf"},
	} {
		var got withShared
		b := New()
		b.Register("d", "t", func(in withShared) error { got = in; return nil },
			WithDefaults(map[string]any{"level": "bundle"}), AllowConf("level"))
		s := runFake(t, b, startupFrame(t, "d", "t", func(sd *protocol.StartupDetails) {
			sd.DagRun.Conf = tc.conf
			sd.ArgBindings = stubDefaults
		}), nil, serveConfig{})
		if s.err != nil || s.terminal == nil || s.terminal.Type() != "SucceedTask" {
			t.Fatalf("conf %v: want success, got %+v (%v)", tc.conf, s.terminal, s.err)
		}
		if got.Level != tc.want {
			t.Errorf("conf %v: level = %q, want %q", tc.conf, got.Level, tc.want)
		}
	}
	// A passed argument that no field claims is still an error.
	b := New()
	b.Register("d", "t", func(in withShared) error { return nil })
	s := runFake(t, b, startupFrame(t, "d", "t", func(sd *protocol.StartupDetails) {
		sd.ArgBindings = []protocol.ArgBinding{{Name: "added_later", Kind: "literal", Value: 1}}
	}), nil, serveConfig{})
	if s.terminal == nil || s.terminal.Type() != "TaskState" {
		t.Fatalf("an unclaimed passed argument must fail the task, got %+v", s.terminal)
	}
}
