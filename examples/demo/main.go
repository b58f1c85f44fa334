// Command demo runs the conversion example end to end on this machine: a
// real S3 server (versitygw over a local directory), the local sandbox
// backend (bubblewrap) and the bundle binary driven through its local
// supervisor, exactly as Airflow would drive it. `make demo` runs it.
//
//	go run ./examples/demo [-bin bin/airflow-go-worker] [-dir demo-out]
//
// It needs bubblewrap and versitygw (on PATH or in $(go env GOPATH)/bin;
// `make tools` installs it).
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

const (
	bucket   = "airflow-artifacts"
	inputKey = "incoming/orders.csv"
	region   = "us-east-1"
)

func main() {
	bin := flag.String("bin", "bin/airflow-go-worker", "the bundle binary (built by `make build`)")
	dir := flag.String("dir", "demo-out", "where the object store, the sandboxes and the state live; the result stays there")
	flag.Parse()
	if err := run(*bin, *dir); err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo failed: %v\n", err)
		os.Exit(1)
	}
}

func step(format string, a ...any) { fmt.Printf("\n==> "+format+"\n", a...) }

func run(bin, dir string) error {
	ctx := context.Background()
	for _, tool := range []string{"bwrap"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed; run: apt-get install -y bubblewrap", tool)
		}
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("the bundle binary %s is missing (%v); build it with `make build`", bin, err)
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := clearDemoDir(dir); err != nil {
		return err
	}
	s3dir, stateDir := filepath.Join(dir, "s3"), filepath.Join(dir, "state")
	for _, d := range []string{s3dir, stateDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}

	step("starting a local S3 server (versitygw) over %s", s3dir)
	gw, err := startVersityGW(s3dir)
	if err != nil {
		return err
	}
	defer gw.stop()
	fmt.Printf("    endpoint %s\n", gw.endpoint)
	client := gw.client()

	step("creating bucket %s and uploading the input s3://%s/%s", bucket, bucket, inputKey)
	input, err := os.ReadFile(filepath.Join("examples", "conversion", "orders.csv"))
	if err != nil {
		return fmt.Errorf("reading the sample input (run the demo from the repository root): %w", err)
	}
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		return fmt.Errorf("creating the bucket: %w", err)
	}
	if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(inputKey), Body: bytes.NewReader(input)}); err != nil {
		return fmt.Errorf("uploading the input: %w", err)
	}
	fmt.Printf("    %d bytes, %d orders\n", len(input), bytes.Count(input, []byte("\n"))-1)

	step("writing the Airflow connection aws_default (keys of the local S3 server)")
	connFile := filepath.Join(dir, "connections.json")
	conns := map[string]any{"aws_default": map[string]any{
		"conn_type": "aws", "login": gw.accessKey, "password": gw.secretKey,
		"extra": map[string]string{"endpoint_url": gw.endpoint, "region_name": region},
	}}
	data, _ := json.MarshalIndent(conns, "", "  ")
	if err := os.WriteFile(connFile, data, 0o600); err != nil {
		return err
	}
	fmt.Printf("    %s\n", connFile)

	step("running Dag sandbox_conversion, task convert, through the local supervisor")
	conf := `{"backend": "local"}`
	args := []string{"run", "--bundle-config", filepath.Join("examples", "conversion", "bundle.yaml"),
		"--dag", "sandbox_conversion", "--task", "convert", "--conf", conf,
		"--connections", connFile, "--state", stateDir}
	fmt.Printf("    %s %s\n", filepath.Base(bin), strings.Join(quoteArgs(args), " "))
	cmd := exec.CommandContext(ctx, bin, args...)
	// Local sandboxes live under XDG_STATE_HOME: keep them inside the demo
	// directory, so the demo leaves nothing elsewhere.
	// The worker's operator decides where file:// may read and write; the
	// demo's own directory is the only place it may (it uses S3 itself).
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+stateDir, "AIRFLOW_GO_WORKER_FILE_ROOTS="+dir)
	// One writer for both streams keeps the task log and the result in order.
	out := prefixed(os.Stdout)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("the convert task did not succeed (%v); its log is above", err)
	}

	step("checking the result")
	listed, err := client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String("converted/")})
	if err != nil {
		return err
	}
	if len(listed.Contents) == 0 {
		return errors.New("nothing landed under converted/")
	}
	for _, o := range listed.Contents {
		fmt.Printf("    s3://%s/%s  (%d bytes)\n", bucket, aws.ToString(o.Key), aws.ToInt64(o.Size))
		if strings.HasSuffix(aws.ToString(o.Key), ".partial") {
			return fmt.Errorf("a staging object was left behind: %s", aws.ToString(o.Key))
		}
	}
	obj, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("converted/orders.jsonl")})
	if err != nil {
		return err
	}
	head, _ := io.ReadAll(io.LimitReader(obj.Body, 4096))
	obj.Body.Close()
	lines := strings.SplitN(strings.TrimSpace(string(head)), "\n", 4)
	fmt.Println("    first lines of converted/orders.jsonl:")
	for _, l := range lines[:min(3, len(lines))] {
		fmt.Printf("      %s\n", l)
	}
	left, _ := os.ReadDir(filepath.Join(stateDir, "airflow-go-worker", "sandboxes"))
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

	step("done: the result landed in s3://%s/converted/ on the local S3 server,\n    stored on disk at %s", bucket, filepath.Join(s3dir, bucket, "converted"))
	return nil
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

// prefixed indents the task's output under the current step. It writes
// synchronously, so everything is printed before cmd.Run returns.
func prefixed(w io.Writer) *linePrefixer { return &linePrefixer{w: w} }

type linePrefixer struct {
	w   io.Writer
	buf []byte
}

func (p *linePrefixer) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		fmt.Fprintf(p.w, "    | %s\n", p.buf[:i])
		p.buf = p.buf[i+1:]
	}
}

// gateway is a running versitygw.
type gateway struct {
	endpoint, accessKey, secretKey string
	cmd                            *exec.Cmd
}

func versityBinary() (string, error) {
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err == nil {
		p := filepath.Join(filepath.SplitList(strings.TrimSpace(string(out)))[0], "bin", "versitygw")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("versitygw is not installed; run `make tools` or `go install github.com/versity/versitygw/cmd/versitygw@v1.8.0`")
}

func startVersityGW(dir string) (*gateway, error) {
	bin, err := versityBinary()
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	g := &gateway{endpoint: "http://" + addr, accessKey: "DEMO" + randHex(8), secretKey: randHex(20)}
	g.cmd = exec.Command(bin, "--port", addr, "--region", region, "--quiet", "posix", dir)
	g.cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+g.accessKey, "ROOT_SECRET_KEY="+g.secretKey)
	var output bytes.Buffer
	g.cmd.Stdout, g.cmd.Stderr = &output, &output
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := g.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting versitygw: %w", err)
	}
	exited := make(chan struct{})
	go func() { g.cmd.Wait(); close(exited) }()
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Get(g.endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return g, nil
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("versitygw exited: %s", output.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			g.stop()
			return nil, fmt.Errorf("versitygw did not answer on %s: %v", g.endpoint, err)
		}
	}
}

func (g *gateway) stop() {
	if g.cmd.Process != nil {
		syscall.Kill(-g.cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { g.cmd.Process.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
		}
	}
}

func (g *gateway) client() *s3.Client {
	return s3.New(s3.Options{
		Region: region, BaseEndpoint: aws.String(g.endpoint), UsePathStyle: true,
		Credentials:                credentials.NewStaticCredentialsProvider(g.accessKey, g.secretKey, ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return strings.ToUpper(hex.EncodeToString(b))
}
