// Command demo runs the conversion example end to end on this machine: a
// real S3 server (versitygw over a local directory), the local sandbox
// backend (bubblewrap) and the bundle binary driven through its local
// supervisor, exactly as Airflow would drive it. `make demo` runs it.
//
//	go run -trimpath ./examples/demo [-bin bin/airflow-go-worker-demo] [-dir demo-out]
//
// It needs bubblewrap and versitygw (on PATH or in $(go env GOPATH)/bin;
// `make tools` installs it).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/redact"
	"github.com/airflow-sandbox/airflow-go-worker/testing/s3server"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"go.yaml.in/yaml/v3"
)

const (
	bucket   = "airflow-artifacts"
	inputKey = "incoming/orders.csv"
)

func main() {
	bin := flag.String("bin", "bin/airflow-go-worker-demo", "the bundle binary, built with the s3 extra (make build EXTRAS=s3) for the demo's S3 server; the default build's local backend is the one the demo's config copy names")
	dir := flag.String("dir", "demo-out", "where the object store, the sandboxes and the state live; the result stays there")
	flag.Parse()
	if err := run(*bin, *dir); err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo failed: %v\n", err)
		os.Exit(1)
	}
}

func step(format string, a ...any) { fmt.Printf("\n==> "+format+"\n", a...) }

// run is the demo, step by step: each step prints what it does.
func run(bin, dir string) error {
	ctx := context.Background()
	d, err := prepare(bin, dir)
	if err != nil {
		return err
	}
	step("starting a local S3 server (versitygw) over %s", d.s3dir)
	gw, err := s3server.Launch(d.s3dir)
	if err != nil {
		return err
	}
	defer gw.Stop()
	fmt.Printf("    endpoint %s\n", gw.Endpoint)
	d.client = gw.Client()
	if err := d.uploadInput(ctx); err != nil {
		return err
	}
	connFile, err := d.writeConnection(gw)
	if err != nil {
		return err
	}
	config, err := d.writeConfig()
	if err != nil {
		return err
	}
	if err := d.runTask(ctx, config, connFile); err != nil {
		return err
	}
	if err := d.checkResult(ctx); err != nil {
		return err
	}
	step("done: the result landed in s3://%s/converted/ on the local S3 server,\n    stored on disk at %s", bucket, filepath.Join(d.s3dir, bucket, "converted"))
	return nil
}

// demo is one run's paths and, once the S3 server is up, its client.
type demo struct {
	bin, dir        string
	s3dir, stateDir string
	client          *s3.Client
}

// prepare checks what the demo needs (bubblewrap, the bundle binary) and
// makes a fresh demo directory.
func prepare(bin, dir string) (*demo, error) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		return nil, errors.New("bwrap is not installed; run: apt-get install -y bubblewrap")
	}
	shown := bin
	bin, err := filepath.Abs(bin)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("the bundle binary %s is missing (%v); build it with `make build EXTRAS=s3 BIN=%s` (make demo does)", bin, err, shown)
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	if err := clearDemoDir(dir); err != nil {
		return nil, err
	}
	d := &demo{bin: bin, dir: dir, s3dir: filepath.Join(dir, "s3"), stateDir: filepath.Join(dir, "state")}
	for _, sub := range []string{d.s3dir, d.stateDir} {
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// uploadInput creates the bucket and uploads the example's orders.csv.
func (d *demo) uploadInput(ctx context.Context) error {
	step("creating bucket %s and uploading the input s3://%s/%s", bucket, bucket, inputKey)
	input, err := os.ReadFile(filepath.Join("examples", "conversion", "orders.csv"))
	if err != nil {
		return fmt.Errorf("reading the sample input (run the demo from the repository root): %w", err)
	}
	if _, err := d.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		return fmt.Errorf("creating the bucket: %w", err)
	}
	if _, err := d.client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(inputKey), Body: bytes.NewReader(input)}); err != nil {
		return fmt.Errorf("uploading the input: %w", err)
	}
	fmt.Printf("    %d bytes, %d orders\n", len(input), bytes.Count(input, []byte("\n"))-1)
	return nil
}

// writeConnection writes the Airflow connection aws_default, with the
// local S3 server's keys, to a connections file and returns its path.
func (d *demo) writeConnection(gw *s3server.Server) (string, error) {
	step("writing the Airflow connection aws_default (keys of the local S3 server)")
	connFile := filepath.Join(d.dir, "connections.json")
	conns := map[string]any{"aws_default": map[string]any{
		"conn_type": "aws", "login": gw.AccessKey, "password": gw.SecretKey,
		"extra": map[string]string{"endpoint_url": gw.Endpoint, "region_name": gw.Region},
	}}
	data, _ := json.MarshalIndent(conns, "", "  ")
	if err := os.WriteFile(connFile, data, 0o600); err != nil {
		return "", err
	}
	fmt.Printf("    %s\n", connFile)
	return connFile, nil
}

// writeConfig writes the demo's own copy of the conversion config.
func (d *demo) writeConfig() (string, error) {
	step("writing a demo-only bundle config: examples/conversion/bundle.yaml on the local backend")
	// The shipped config runs on Modal, and dag_run.conf may not move it
	// (that is the Dag author's choice, not a triggering user's): the demo
	// is its own Dag author and sets backend: local in a copy.
	config := filepath.Join(d.dir, "conversion-local.yaml")
	if err := writeLocalConfig(filepath.Join("examples", "conversion", "bundle.yaml"), config); err != nil {
		return "", err
	}
	fmt.Printf("    %s\n", config)
	return config, nil
}

// runTask runs the convert task through the bundle's local supervisor,
// its log indented under the step.
func (d *demo) runTask(ctx context.Context, config, connFile string) error {
	step("running Dag sandbox_conversion, task convert, through the local supervisor")
	args := []string{"run", "--bundle-config", config,
		"--dag", "sandbox_conversion", "--task", "convert",
		"--connections", connFile, "--state", d.stateDir}
	fmt.Printf("    %s %s\n", filepath.Base(d.bin), strings.Join(quoteArgs(args), " "))
	cmd := exec.CommandContext(ctx, d.bin, args...)
	// Local sandboxes live under XDG_STATE_HOME: keep them inside the demo
	// directory, so the demo leaves nothing elsewhere.
	// The worker's operator decides where file:// may read and write; the
	// demo's own directory is the only place it may (it uses S3 itself).
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+d.stateDir, "AIRFLOW_GO_WORKER_FILE_ROOTS="+d.dir)
	// One writer for both streams keeps the task log and the result in order.
	out := prefixed(os.Stdout)
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Run()
	out.Flush()
	if err != nil {
		return fmt.Errorf("the convert task did not succeed (%v); its log is above", err)
	}
	return nil
}

// checkResult lists what landed under converted/, shows the first lines
// of the JSON Lines file, and checks no staging object or sandbox is left.
func (d *demo) checkResult(ctx context.Context) error {
	step("checking the result")
	jsonl, err := d.listConverted(ctx)
	if err != nil {
		return err
	}
	obj, err := d.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(jsonl)})
	if err != nil {
		return err
	}
	head, _ := io.ReadAll(io.LimitReader(obj.Body, 4096))
	obj.Body.Close()
	lines := strings.SplitN(strings.TrimSpace(string(head)), "\n", 4)
	fmt.Printf("    first lines of %s:\n", jsonl)
	for _, l := range lines[:min(3, len(lines))] {
		fmt.Printf("      %s\n", l)
	}
	left, _ := os.ReadDir(filepath.Join(d.stateDir, "airflow-go-worker", "sandboxes"))
	alive := 0
	for _, e := range left {
		if e.IsDir() && strings.HasPrefix(e.Name(), "airflow-sandbox-") {
			alive++
		}
	}
	fmt.Printf("    sandboxes left behind: %d\n", alive)
	if alive != 0 {
		return errors.New("the sandbox was not destroyed")
	}
	return nil
}

// listConverted prints the objects under converted/ and returns the key of
// the JSON Lines file; a staging object left behind is an error.
func (d *demo) listConverted(ctx context.Context) (string, error) {
	listed, err := d.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String("converted/")})
	if err != nil {
		return "", err
	}
	if len(listed.Contents) == 0 {
		return "", errors.New("nothing landed under converted/")
	}
	// The config keys outputs by run: converted/<run_id>/orders.jsonl.
	jsonl := ""
	for _, o := range listed.Contents {
		key := aws.ToString(o.Key)
		fmt.Printf("    s3://%s/%s  (%d bytes)\n", bucket, key, aws.ToInt64(o.Size))
		if strings.HasSuffix(key, ".partial") {
			return "", fmt.Errorf("a staging object was left behind: %s", key)
		}
		if strings.HasSuffix(key, "/orders.jsonl") {
			jsonl = key
		}
	}
	if jsonl == "" {
		return "", errors.New("no converted/<run_id>/orders.jsonl landed")
	}
	return jsonl, nil
}

// writeLocalConfig copies a bundle config with every task's backend
// default set to local and only the local backend's options, so a binary
// built with the local backend alone runs it too (comments and everything
// else kept).
func writeLocalConfig(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("reading the example's bundle config (run the demo from the repository root): %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) != 1 {
		return fmt.Errorf("%s: not a YAML document: %v", src, err)
	}
	set := 0
	for _, dag := range mappingValues(lookup(doc.Content[0], "dags")) {
		for _, task := range mappingValues(lookup(dag, "tasks")) {
			if b := lookup(lookup(task, "defaults"), "backend"); b != nil {
				b.Value = "local"
				set++
			}
		}
	}
	if set == 0 {
		return fmt.Errorf("%s: no task sets a backend default to switch to local", src)
	}
	if opts := lookup(doc.Content[0], "backends"); opts != nil && opts.Kind == yaml.MappingNode {
		var keep []*yaml.Node
		for i := 0; i+1 < len(opts.Content); i += 2 {
			if opts.Content[i].Value == "local" {
				keep = append(keep, opts.Content[i], opts.Content[i+1])
			}
		}
		opts.Content = keep
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "# Written by make demo: %s with backend: local in every task.\n", src)
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return err
	}
	return os.WriteFile(dst, out.Bytes(), 0o644)
}

// lookup is the value under key in a YAML mapping, nil when absent.
func lookup(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// mappingValues are a YAML mapping's values, in order.
func mappingValues(m *yaml.Node) []*yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	var out []*yaml.Node
	for i := 1; i < len(m.Content); i += 2 {
		out = append(out, m.Content[i])
	}
	return out
}

// demoMarker marks a directory the demo made, the only kind it deletes.
const demoMarker = ".airflow-go-worker-demo"

// clearDemoDir empties a previous demo's directory and creates it afresh.
// It refuses to delete a non-empty directory the demo did not make.
func clearDemoDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err == nil && len(entries) > 0 {
		if _, err := os.Stat(filepath.Join(dir, demoMarker)); err != nil {
			return fmt.Errorf("%s exists and was not made by the demo; choose another directory with -dir (or DEMO_DIR)", dir)
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, demoMarker), nil, 0o644)
}

func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " {\"") {
			a = "'" + a + "'"
		}
		out[i] = a
	}
	return out
}

// prefixed indents the task's output under the current step, line by
// line. It writes synchronously, so everything but a last unterminated
// line (Flush) is printed before cmd.Run returns.
func prefixed(w io.Writer) *redact.Lines {
	return redact.NewLines(redact.New(), 16<<10, func(text string, newline bool) {
		fmt.Fprintf(w, "    | %s\n", text)
	})
}
