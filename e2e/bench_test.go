package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/local"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
	"github.com/airflow-sandbox/airflow-go-worker/tasks"
	"github.com/airflow-sandbox/airflow-go-worker/testing/s3server"
)

// BenchExportBytesEnv sets the exported file's size (default 1 GiB), e.g.
// 64MiB for a quick run or 4GiB to check that memory does not grow with it.
const BenchExportBytesEnv = "AIRFLOW_GO_WORKER_BENCH_EXPORT_BYTES"

// benchChildEnv makes the test binary a one-shot transfer process, so the
// peak memory measured is that of one transfer and nothing else.
const benchChildEnv = "AIRFLOW_GO_WORKER_BENCH_CHILD"

// benchJob is what the parent asks a child to do.
type benchJob struct {
	Mode      string // "put": storage.Put from a host file; "export": tasks.Export from a sandbox
	AWS       connections.AWSConfig
	File      string // put: the host file
	Sandbox   string // export: the sandbox id (local backend, root from XDG_STATE_HOME)
	Dest      string
	SizeBytes int64
}

// runBenchChild runs in the child process; it prints the transfer's
// duration in nanoseconds.
func runBenchChild(spec string) error {
	var job benchJob
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		return err
	}
	ctx := context.Background()
	start := time.Now()
	switch job.Mode {
	case "put":
		f, err := os.Open(job.File)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := storage.Put(ctx, job.Dest, f, storage.Options{AWS: &job.AWS, ProgressEvery: -1}); err != nil {
			return err
		}
	case "export":
		// The log line "staged" marks the end of streaming, before the
		// commit moves the staged object into place.
		stamp := &stagedStamp{}
		d := tasks.Deps{Logger: benchLogger(stamp), Airflow: benchAirflow{job.AWS}, Run: tasks.Run{DagID: "bench", RunID: "run", TaskID: "export", MapIndex: -1}}
		if _, err := tasks.Export(ctx, d, tasks.ExportInput{Sandbox: tasks.SandboxRef{ID: job.Sandbox},
			Exports: map[string]string{"big.bin": job.Dest}, ExportConnID: "aws", MaxBytes: job.SizeBytes}); err != nil {
			return err
		}
		total := time.Since(start)
		fmt.Println(total.Nanoseconds(), stamp.at().Sub(start).Nanoseconds())
		return nil
	default:
		return fmt.Errorf("unknown mode %q", job.Mode)
	}
	d := time.Since(start).Nanoseconds()
	fmt.Println(d, d)
	return nil
}

// stagedStamp remembers when the export logged "staged".
type stagedStamp struct {
	mu sync.Mutex
	t  time.Time
}

func (s *stagedStamp) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("staged:")) {
		s.mu.Lock()
		s.t = time.Now()
		s.mu.Unlock()
	}
	return len(p), nil
}

func (s *stagedStamp) at() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.t
}

type benchAirflow struct{ aws connections.AWSConfig }

func (a benchAirflow) GetConnection(_ context.Context, id string) (connections.Connection, error) {
	extra, _ := json.Marshal(map[string]string{"endpoint_url": a.aws.EndpointURL, "region_name": a.aws.Region})
	return connections.Connection{ConnID: id, ConnType: "aws", Login: a.aws.AccessKeyID, Password: a.aws.SecretAccessKey, Extra: string(extra)}, nil
}
func (benchAirflow) GetVariable(context.Context, string) (string, error) { return "", nil }
func (benchAirflow) SetXCom(context.Context, string, any) error          { return nil }
func (benchAirflow) MaskSecret(context.Context, string, string) error    { return nil }

// benchChild runs one transfer in a fresh process and returns its
// duration, the time until the bytes were staged (the whole duration for a
// put) and the process's peak resident memory.
func benchChild(b *testing.B, env []string, job benchJob) (total, staged time.Duration, peak int64) {
	b.Helper()
	spec, _ := json.Marshal(job)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(env, benchChildEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("%s transfer: %v", job.Mode, err)
	}
	var totalNS, stagedNS int64
	if _, err := fmt.Sscan(string(out), &totalNS, &stagedNS); err != nil || stagedNS <= 0 {
		b.Fatalf("%s transfer printed %q", job.Mode, out)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return time.Duration(totalNS), time.Duration(stagedNS), ru.Maxrss * 1024 // Linux reports KiB
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

func benchSize(b *testing.B) int64 {
	s := os.Getenv(BenchExportBytesEnv)
	if s == "" {
		return 1 << 30
	}
	n, err := parseSize(s)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: give a size such as 1073741824, 64MiB or 4GiB", BenchExportBytesEnv, s)
	}
	return n
}

func parseSize(s string) (int64, error) {
	for suffix, mult := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if len(s) > len(suffix) && s[len(s)-len(suffix):] == suffix {
			n, err := strconv.ParseInt(s[:len(s)-len(suffix)], 10, 64)
			return n * mult, err
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

// patternReader yields n bytes of a cheap, non-constant pattern.
type patternReader struct{ left, pos int64 }

func (p *patternReader) Read(b []byte) (int, error) {
	if p.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > p.left {
		b = b[:p.left]
	}
	for i := range b {
		b[i] = byte((p.pos + int64(i)) * 7 >> 3)
	}
	p.pos += int64(len(b))
	p.left -= int64(len(b))
	return len(b), nil
}

// BenchmarkExportToS3 compares exporting a file from a local sandbox to S3
// (versitygw) through tasks.Export with uploading the same file from disk
// through package storage (the same S3 client), each in its own process,
// and reports the export's throughput ratio and peak memory.
func BenchmarkExportToS3(b *testing.B) {
	size := benchSize(b)
	srv := s3server.Start(b)
	srv.CreateBucket(b, "bench")
	dir := b.TempDir()
	stateHome := filepath.Join(dir, "state")
	env := append(os.Environ(), "XDG_STATE_HOME="+stateHome)

	src := filepath.Join(dir, "big.bin")
	f, err := os.Create(src)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if _, err := io.Copy(w, &patternReader{left: size}); err != nil {
		b.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()

	drv, err := local.New(local.Options{Root: filepath.Join(stateHome, "airflow-go-worker", "sandboxes")})
	if err != nil {
		b.Fatal(err)
	}
	defer drv.Close()
	ctx := context.Background()
	sb, err := sandbox.Create(ctx, drv, sandbox.Spec{Owner: "bench/run", Timeout: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(ctx)
	in, err := os.Open(src)
	if err != nil {
		b.Fatal(err)
	}
	if err := sb.WriteFile(ctx, "big.bin", in, 0); err != nil {
		b.Fatal(err)
	}
	in.Close()

	var direct, export, staged time.Duration
	var directRSS, exportRSS int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, _, rss := benchChild(b, env, benchJob{Mode: "put", AWS: srv.AWS(), File: src, Dest: fmt.Sprintf("s3://bench/direct-%d.bin", i)})
		direct += d
		directRSS = max(directRSS, rss)
		e, st, rss := benchChild(b, env, benchJob{Mode: "export", AWS: srv.AWS(), Sandbox: sb.ID(), Dest: fmt.Sprintf("s3://bench/export-%d.bin", i), SizeBytes: size})
		export += e
		staged += st
		exportRSS = max(exportRSS, rss)
	}
	b.StopTimer()
	mbps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / (1 << 20) }
	b.ReportMetric(float64(size)/(1<<20), "file-MiB")
	b.ReportMetric(mbps(direct), "direct-MiB/s")
	b.ReportMetric(mbps(export), "export-MiB/s")
	b.ReportMetric(direct.Seconds()/export.Seconds(), "export/direct")
	// Streaming alone, before the commit's server-side copy of the staged
	// object (a full data copy on versitygw's posix backend, cheap on S3).
	b.ReportMetric(mbps(staged), "stage-MiB/s")
	b.ReportMetric(direct.Seconds()/staged.Seconds(), "stage/direct")
	b.ReportMetric(float64(directRSS)/(1<<20), "direct-peak-MiB")
	b.ReportMetric(float64(exportRSS)/(1<<20), "export-peak-MiB")
}

// benchLogger feeds the stamp, and shows the export's own timeline when
// AIRFLOW_GO_WORKER_BENCH_DEBUG is set.
func benchLogger(stamp *stagedStamp) hclog.Logger {
	var out io.Writer = stamp
	if os.Getenv("AIRFLOW_GO_WORKER_BENCH_DEBUG") != "" {
		out = io.MultiWriter(stamp, os.Stderr)
	}
	return hclog.New(&hclog.LoggerOptions{Output: out, Level: hclog.Info})
}
