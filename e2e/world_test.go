// Package e2e_test runs the examples end to end: the real bundle binary,
// forked by the local supervisor over the real coordinator protocol, with
// sandboxes on the local backend (bubblewrap), fake Modal and fake
// OpenSandbox servers, and a real S3 server (versitygw).
package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"go.yaml.in/yaml/v3"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/supervisor"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/local"
	"github.com/airflow-sandbox/airflow-go-worker/testing/fakemodal"
	"github.com/airflow-sandbox/airflow-go-worker/testing/fakeopensandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/s3server"
	"github.com/airflow-sandbox/airflow-go-worker/testing/syncbuf"
)

const bucket = "airflow-artifacts"

// Binaries built once for the whole package.
var (
	workerBin  string // cmd/airflow-go-worker
	goTasksBin string // examples/go_tasks
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(benchChildEnv); spec != "" {
		if err := runBenchChild(spec); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	workerBin = filepath.Join(dir, "airflow-go-worker")
	goTasksBin = filepath.Join(dir, "go_tasks")
	for bin, pkg := range map[string]string{workerBin: "../cmd/airflow-go-worker", goTasksBin: "../examples/go_tasks"} {
		// The e2e tests use every backend and store: the standard binary
		// is built with all of them (make build EXTRAS=all).
		if out, err := exec.Command("go", "build", "-tags", "all_extras", "-o", bin, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", pkg, err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// world is one test's outside world: an S3 server with the artifacts
// bucket, a local sandbox root, optional fake Modal / OpenSandbox servers,
// and the Airflow connections that reach them.
type world struct {
	t        *testing.T
	dir      string
	s3       *s3server.Server
	modal    *fakemodal.Server
	osb      *fakeopensandbox.Server
	env      []string
	conns    map[string]any
	connFile string
	logs     *syncbuf.Buffer
}

func newWorld(t *testing.T, backend string) *world {
	t.Helper()
	w := &world{t: t, dir: t.TempDir(), logs: &syncbuf.Buffer{}}
	w.s3 = s3server.Start(t)
	w.s3.CreateBucket(t, bucket)
	w.env = append(os.Environ(), "XDG_STATE_HOME="+w.stateHome())
	w.conns = map[string]any{"aws_default": map[string]any{
		"conn_type": "aws", "login": w.s3.AccessKey, "password": w.s3.SecretKey,
		"extra": map[string]string{"endpoint_url": w.s3.Endpoint, "region_name": w.s3.Region},
	}}
	switch backend {
	case "modal":
		w.modal = fakemodal.Start(t, fakemodal.Options{Root: filepath.Join(w.dir, "fakemodal")})
		for k, v := range w.modal.Env() {
			// Credentials come from the modal_default connection, not the
			// environment, so the connection path is what is tested.
			if k != "MODAL_TOKEN_ID" && k != "MODAL_TOKEN_SECRET" {
				w.env = append(w.env, k+"="+v)
			}
		}
		w.conns["modal_default"] = map[string]any{"conn_type": "modal", "login": w.modal.TokenID(), "password": w.modal.TokenSecret()}
	case "opensandbox":
		w.osb = fakeopensandbox.Start(t, fakeopensandbox.Options{})
		host, port, _ := strings.Cut(w.osb.Domain, ":")
		var p int
		fmt.Sscan(port, &p)
		w.conns["opensandbox_default"] = map[string]any{"conn_type": "opensandbox", "host": host, "port": p, "password": w.osb.APIKey}
	}
	w.writeConnections()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("task logs:\n%s", w.logs.String())
		}
	})
	return w
}

func (w *world) stateHome() string { return filepath.Join(w.dir, "state") }

func (w *world) writeConnections() {
	w.connFile = filepath.Join(w.dir, "connections.json")
	data, _ := json.Marshal(w.conns)
	if err := os.WriteFile(w.connFile, data, 0o600); err != nil {
		w.t.Fatal(err)
	}
}

// supervisor forks the standard bundle with the given example config, or
// another bundle binary when config is "".
func (w *world) supervisor(exe, config string) *supervisor.Supervisor {
	var args []string
	if config != "" {
		abs, err := filepath.Abs(config)
		if err != nil {
			w.t.Fatal(err)
		}
		args = []string{"--bundle-config", abs}
	}
	return &supervisor.Supervisor{
		Executable: exe, Args: args, Env: w.env, ConnectionsFile: w.connFile,
		StateDir: filepath.Join(w.dir, "xcom"), Logs: w.logs, KillGrace: 5 * time.Second,
	}
}

// runTask runs one task and fails the test unless it reaches want.
func (w *world) runTask(sup *supervisor.Supervisor, req supervisor.TaskRequest, want string) supervisor.Result {
	w.t.Helper()
	res, err := sup.RunTask(deadline.Context(w.t), req)
	if err != nil && want == supervisor.StateSuccess {
		w.t.Fatalf("%s.%s: %v", req.DagID, req.TaskID, err)
	}
	if res.State != want {
		w.t.Fatalf("%s.%s ended %q (%s), want %q", req.DagID, req.TaskID, res.State, res.RetryReason, want)
	}
	return res
}

func (w *world) xcom(sup *supervisor.Supervisor, dag, run, task, key string) any {
	w.t.Helper()
	v, ok, err := sup.GetXCom(dag, run, task, key)
	if err != nil || !ok {
		w.t.Fatalf("XCom %s of %s: ok=%v err=%v", key, task, ok, err)
	}
	return v
}

func (w *world) putObject(key, body string) {
	w.t.Helper()
	_, err := w.s3.Client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body)})
	if err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) getObject(key string) (string, bool) {
	w.t.Helper()
	out, err := w.s3.Client().GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return "", false
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		w.t.Fatal(err)
	}
	return string(b), true
}

// keys lists every object in the bucket.
func (w *world) keys() []string {
	w.t.Helper()
	out, err := w.s3.Client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		w.t.Fatal(err)
	}
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	sort.Strings(keys)
	return keys
}

// localDriver opens the sandbox root the bundle's local backend uses.
func (w *world) localDriver() *local.Driver {
	w.t.Helper()
	d, err := local.New(local.Options{Root: filepath.Join(w.stateHome(), "airflow-go-worker", "sandboxes"), IgnoreImage: true})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { d.Close() })
	return d
}

// alive lists the sandboxes still alive on the backend.
func (w *world) alive(backend string) []string {
	w.t.Helper()
	var ids []string
	switch backend {
	case "local":
		list, err := w.localDriver().ListSandboxes(context.Background(), nil)
		if err != nil {
			w.t.Fatal(err)
		}
		for _, s := range list {
			ids = append(ids, s.ID)
		}
	case "modal":
		for _, s := range w.modal.Sandboxes() {
			ids = append(ids, s.ID)
		}
	case "opensandbox":
		for _, s := range w.osb.Sandboxes() {
			if s.State != "Terminated" && s.State != "Deleted" {
				ids = append(ids, s.ID)
			}
		}
	}
	return ids
}

// allowConf copies the bundle config at path with more inputs a run's
// dag_run.conf may set (task id -> input names), as a Dag author who wants
// triggers to choose them would write it, and returns the copy's path. The
// examples allow little: tests that move them to another backend say so.
func (w *world) allowConf(path string, allow map[string][]string) string {
	w.t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		w.t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		w.t.Fatal(err)
	}
	value := func(n *yaml.Node, key string) *yaml.Node {
		for i := 0; n != nil && i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				return n.Content[i+1]
			}
		}
		return nil
	}
	dags := value(doc.Content[0], "dags")
	for i := 1; i < len(dags.Content); i += 2 {
		tasks := value(dags.Content[i], "tasks")
		for j := 0; j+1 < len(tasks.Content); j += 2 {
			keys, task := allow[tasks.Content[j].Value], tasks.Content[j+1]
			if len(keys) == 0 {
				continue
			}
			conf := value(task, "conf")
			if conf == nil {
				conf = &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
				task.Content = append(task.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "conf"}, conf)
			}
			for _, k := range keys {
				conf.Content = append(conf.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k})
			}
		}
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		w.t.Fatal(err)
	}
	copyPath := filepath.Join(w.dir, "conf-allowed-"+filepath.Base(path))
	if err := os.WriteFile(copyPath, out, 0o644); err != nil {
		w.t.Fatal(err)
	}
	return copyPath
}

// backendConf points an example at backend (the examples' backends:
// section makes their registry image runnable on the local backend).
func backendConf(backend string) map[string]any {
	switch backend {
	case "local":
		return map[string]any{"backend": "local"}
	case "opensandbox":
		return map[string]any{"backend": "opensandbox", "conn_id": "opensandbox_default"}
	}
	return map[string]any{"backend": "modal"}
}

var _ driver.Driver = (*local.Driver)(nil)
