package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
	gstorage "google.golang.org/api/storage/v1"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/local"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
	"github.com/airflow-sandbox/airflow-go-worker/storage/azure"
	"github.com/airflow-sandbox/airflow-go-worker/storage/gcs"
	s3store "github.com/airflow-sandbox/airflow-go-worker/storage/s3" // also registers s3:// for the tests' own transfers
	"github.com/airflow-sandbox/airflow-go-worker/tasks"
	"github.com/airflow-sandbox/airflow-go-worker/testing/azurite"
	"github.com/airflow-sandbox/airflow-go-worker/testing/gcsserver"
	"github.com/airflow-sandbox/airflow-go-worker/testing/s3server"
)

// BenchExportBytesEnv sets the bytes each export moves (default 1 GiB), in
// one file or split over three, e.g. 64MiB for a quick run or 4GiB to check
// that memory does not grow with it.
const BenchExportBytesEnv = "AIRFLOW_GO_WORKER_BENCH_EXPORT_BYTES"

// BenchStoresEnv limits the stores benchmarked (comma separated: s3, gcs,
// azure; default all). fake-gcs-server rehashes an object at every chunk
// of a resumable upload, so GCS at 4 GiB takes hours: use s3,azure there.
const BenchStoresEnv = "AIRFLOW_GO_WORKER_BENCH_STORES"

// benchChildEnv makes the test binary a one-shot transfer process, so the
// peak memory measured is that of one transfer and nothing else.
const benchChildEnv = "AIRFLOW_GO_WORKER_BENCH_CHILD"

// BenchProfileEnv names a directory where each transfer process writes a
// CPU profile and a heap profile taken at its end
// (<mode>-<store>-<files>files-<pid>.cpu / .heap), to see where an export
// spends its time or memory beyond the SDK's direct upload.
const BenchProfileEnv = "AIRFLOW_GO_WORKER_BENCH_PROFILE"

// benchJob is what the parent asks a child to do.
type benchJob struct {
	// Mode "direct" uploads Files from the host with the store's own SDK
	// (aws-sdk's manager.Uploader, the generated GCS JSON client's
	// resumable Objects.Insert, azblob's UploadFile), one after the other;
	// "export" runs tasks.Export of Paths from Sandbox (local backend, root
	// from XDG_STATE_HOME).
	Mode    string
	Store   string // s3, gcs, azure
	Conn    connections.Connection
	Files   []string
	Sandbox string
	Paths   []string
	Dests   []string // URLs, in the order of Files or Paths
	Size    int64    // of the largest file (the export's max_bytes)
}

// runBenchChild runs in the child process; it prints the transfer's
// duration in nanoseconds.
func runBenchChild(spec string) error {
	var job benchJob
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		return err
	}
	ctx := context.Background()
	stopProfile, err := startBenchProfile(job)
	if err != nil {
		return err
	}
	start := time.Now()
	switch job.Mode {
	case "direct":
		err = directUpload(ctx, job)
	case "export":
		exports := map[string]string{}
		for i, p := range job.Paths {
			exports[p] = job.Dests[i]
		}
		d := tasks.Deps{Logger: benchLogger(), Airflow: benchAirflow{job.Conn}, Run: tasks.Run{DagID: "bench", RunID: "run", TaskID: "export", MapIndex: -1}}
		_, err = tasks.Export(ctx, d, tasks.ExportInput{Sandbox: tasks.SandboxRef{ID: job.Sandbox}, Exports: exports, ExportConnID: job.Conn.ConnID, MaxBytes: job.Size})
	default:
		err = fmt.Errorf("unknown mode %q", job.Mode)
	}
	took := time.Since(start)
	if err != nil {
		return err
	}
	if err := stopProfile(); err != nil {
		return err
	}
	fmt.Println(took.Nanoseconds())
	return nil
}

// startBenchProfile starts the CPU profile BenchProfileEnv asks for; the
// function it returns stops it and writes the heap profile.
func startBenchProfile(job benchJob) (func() error, error) {
	dir := os.Getenv(BenchProfileEnv)
	if dir == "" {
		return func() error { return nil }, nil
	}
	base := filepath.Join(dir, fmt.Sprintf("%s-%s-%dfiles-%d", job.Mode, job.Store, len(job.Dests), os.Getpid()))
	runtime.MemProfileRate = 4096
	cpu, err := os.Create(base + ".cpu")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", BenchProfileEnv, err)
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := cpu.Close(); err != nil {
			return err
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		_ = os.WriteFile(base+".memstats", fmt.Appendf(nil, "%+v\n", ms), 0o644)
		runtime.GC() // publishes the allocations since the last cycle
		heap, err := os.Create(base + ".heap")
		if err != nil {
			return err
		}
		if err := pprof.Lookup("allocs").WriteTo(heap, 0); err != nil {
			return err
		}
		if status, err := os.ReadFile("/proc/self/status"); err == nil {
			_ = os.WriteFile(base+".status", status, 0o644)
		}
		return heap.Close()
	}, nil
}

// directUpload is the baseline: each file uploaded by the store's own SDK,
// with the part or chunk size and concurrency package storage uses.
func directUpload(ctx context.Context, job benchJob) error {
	for i, file := range job.Files {
		loc, err := storage.Default.Parse(job.Dests[i])
		if err != nil {
			return err
		}
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		switch job.Store {
		case "s3":
			cfg, err := s3store.AWSFromConnection(job.Conn)
			if err != nil {
				return err
			}
			client := s3.New(s3.Options{
				Region: cfg.Region, BaseEndpoint: aws.String(cfg.EndpointURL), UsePathStyle: true,
				Credentials:                credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, ""),
				RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
				ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
			})
			up := manager.NewUploader(client, func(u *manager.Uploader) {
				u.PartSize, u.Concurrency = storage.PartSize, storage.UploadConcurrency
			})
			// A plain reader, as the export's stream is: no seeking.
			_, err = up.Upload(ctx, &s3.PutObjectInput{Bucket: aws.String(loc.Bucket), Key: aws.String(loc.Key), Body: struct{ io.Reader }{f}})
			if err != nil {
				return err
			}
		case "gcs":
			cfg, err := gcs.FromConnection(job.Conn)
			if err != nil {
				return err
			}
			svc, err := gstorage.NewService(ctx, option.WithEndpoint(cfg.Endpoint+"/storage/v1/"), option.WithoutAuthentication(), option.WithTelemetryDisabled())
			if err != nil {
				return err
			}
			// The generated client's own resumable upload, in chunks of the
			// driver's size.
			_, err = svc.Objects.Insert(loc.Bucket, &gstorage.Object{Name: loc.Key}).
				Media(struct{ io.Reader }{f}, googleapi.ChunkSize(gcs.ChunkSize)).Context(ctx).Do()
			if err != nil {
				return err
			}
		case "azure":
			cfg, err := azure.FromConnection(job.Conn)
			if err != nil {
				return err
			}
			cred, err := azblob.NewSharedKeyCredential(cfg.AccountName, cfg.AccountKey)
			if err != nil {
				return err
			}
			client, err := azblob.NewClientWithSharedKeyCredential(cfg.AccountURL, cred, nil)
			if err != nil {
				return err
			}
			if _, err := client.UploadFile(ctx, loc.Bucket, loc.Key, f, &azblob.UploadFileOptions{BlockSize: storage.PartSize, Concurrency: storage.UploadConcurrency}); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unknown store %q", job.Store)
		}
	}
	return nil
}

type benchAirflow struct{ conn connections.Connection }

func (a benchAirflow) GetConnection(context.Context, string) (connections.Connection, error) {
	return a.conn, nil
}
func (benchAirflow) GetVariable(context.Context, string) (string, error) { return "", nil }
func (benchAirflow) SetXCom(context.Context, string, any) error          { return nil }
func (benchAirflow) MaskSecret(context.Context, string, string) error    { return nil }

// benchLogger shows the export's own timeline when
// AIRFLOW_GO_WORKER_BENCH_DEBUG is set.
func benchLogger() hclog.Logger {
	if os.Getenv("AIRFLOW_GO_WORKER_BENCH_DEBUG") == "" {
		return hclog.NewNullLogger()
	}
	return hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Info})
}

// childRun is what one transfer process took: its own timing of the
// transfer, its peak resident memory and the CPU time (user and system) of
// the whole process.
type childRun struct {
	took time.Duration
	rss  int64
	cpu  time.Duration
}

// benchChild runs one transfer in a fresh process.
func benchChild(b *testing.B, env []string, job benchJob) childRun {
	b.Helper()
	spec, _ := json.Marshal(job)
	// Each transfer starts with the previous ones' writes on disk: the
	// emulators write every byte twice (parts, then the object), and the
	// kernel's write-back of one transfer otherwise throttles the next.
	syscall.Sync()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(env, benchChildEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("%s %s transfer: %v", job.Store, job.Mode, err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil || ns <= 0 {
		b.Fatalf("%s %s transfer printed %q", job.Store, job.Mode, out)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return childRun{took: time.Duration(ns), rss: ru.Maxrss * 1024, cpu: cpu} // Linux reports KiB
}

// benchStore is a store under benchmark: a bucket on its emulator and the
// connection that reaches it.
type benchStore struct {
	name string
	conn connections.Connection
	url  func(key string) string
}

func startBenchStore(b *testing.B, name string) benchStore {
	switch name {
	case "s3":
		srv := s3server.Start(b)
		srv.CreateBucket(b, "bench")
		return benchStore{name, srv.Connection("bench"), func(k string) string { return "s3://bench/" + k }}
	case "gcs":
		srv := gcsserver.Start(b)
		srv.CreateBucket(b, "bench")
		return benchStore{name, srv.Connection("bench"), func(k string) string { return "gs://bench/" + k }}
	case "azure":
		srv := azurite.Start(b)
		srv.CreateContainer(b, "bench")
		return benchStore{name, srv.Connection("bench"), func(k string) string { return "abfs://bench/" + k }}
	}
	b.Fatalf("%s=%q: unknown store %q; use s3, gcs or azure", BenchStoresEnv, os.Getenv(BenchStoresEnv), name)
	return benchStore{}
}

// BenchmarkExport exports from a local sandbox to each store (versitygw,
// fake-gcs-server, Azurite), one file of the benchmark size or three files
// of a third of it, through tasks.Export, and compares it with uploading
// the same host files with the store's own SDK, each transfer in its own
// process. Every iteration runs the pair twice, in both orders (direct,
// export, export, direct), so neither side always meets a warmer disk. Run
// with -benchtime 1x; the reported ratio is direct time over export time
// (1 = the SDK's speed), the peaks are each process's VmHWM, and the CPU
// time per GiB is each process's user+system time.
func BenchmarkExport(b *testing.B) {
	size := benchSize(b)
	stores := []string{"s3", "gcs", "azure"}
	if v := os.Getenv(BenchStoresEnv); v != "" {
		stores = strings.Split(v, ",")
	}
	dir := b.TempDir()
	stateHome := filepath.Join(dir, "state")
	env := append(os.Environ(), "XDG_STATE_HOME="+stateHome)
	drv, err := local.New(local.Options{Root: filepath.Join(stateHome, "airflow-go-worker", "sandboxes")})
	if err != nil {
		b.Fatal(err)
	}
	defer drv.Close()
	ctx := context.Background()
	sb, err := sandbox.NewBackend(drv).Create(ctx, sandbox.Spec{Owner: "bench/run", Lifetime: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(ctx)

	layouts := []struct {
		name  string
		files int
	}{{"1file", 1}, {"3files", 3}}
	hostFiles := map[string][]string{}
	for _, l := range layouts {
		for i := 0; i < l.files; i++ {
			name := fmt.Sprintf("%s-%d.bin", l.name, i)
			p := filepath.Join(dir, name)
			writePattern(b, p, size/int64(l.files))
			in, err := os.Open(p)
			if err != nil {
				b.Fatal(err)
			}
			if err := sb.WriteFile(ctx, name, in, 0); err != nil {
				b.Fatal(err)
			}
			in.Close()
			hostFiles[l.name] = append(hostFiles[l.name], p)
		}
	}
	for _, storeName := range stores {
		st := startBenchStore(b, strings.TrimSpace(storeName))
		for _, l := range layouts {
			b.Run(st.name+"/"+l.name, func(b *testing.B) {
				files := hostFiles[l.name]
				var direct, export childRun // durations summed, peaks the highest
				for i := 0; i < b.N; i++ {
					for _, mode := range []string{"direct", "export", "export", "direct"} {
						job := benchJob{Mode: mode, Store: st.name, Conn: st.conn, Size: size / int64(l.files)}
						for _, f := range files {
							job.Dests = append(job.Dests, st.url(fmt.Sprintf("%s/%s/%s", mode, l.name, filepath.Base(f))))
							job.Files = append(job.Files, f)
							job.Paths = append(job.Paths, filepath.Base(f))
						}
						if mode == "export" {
							job.Files, job.Sandbox = nil, sb.ID()
						} else {
							job.Paths = nil
						}
						run := benchChild(b, env, job)
						sum := &export
						if mode == "direct" {
							sum = &direct
						}
						sum.took, sum.cpu, sum.rss = sum.took+run.took, sum.cpu+run.cpu, max(sum.rss, run.rss)
					}
				}
				mibps := func(d time.Duration) float64 { return float64(2*size) * float64(b.N) / d.Seconds() / (1 << 20) }
				b.ReportMetric(float64(size)/(1<<20), "MiB")
				b.ReportMetric(mibps(direct.took), "direct-MiB/s")
				b.ReportMetric(mibps(export.took), "export-MiB/s")
				b.ReportMetric(direct.took.Seconds()/export.took.Seconds(), "export/direct")
				b.ReportMetric(float64(direct.rss)/(1<<20), "direct-peak-MiB")
				b.ReportMetric(float64(export.rss)/(1<<20), "export-peak-MiB")
				// CPU time per GiB moved, the whole process's: unlike the
				// rates, it hardly depends on what else the machine runs.
				gib := float64(2*size) * float64(b.N) / (1 << 30)
				b.ReportMetric(direct.cpu.Seconds()/gib, "direct-cpu-s/GiB")
				b.ReportMetric(export.cpu.Seconds()/gib, "export-cpu-s/GiB")
			})
		}
	}
}

func writePattern(b *testing.B, path string, n int64) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if _, err := io.Copy(w, &patternReader{left: n}); err != nil {
		b.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
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
