package s3_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/airflow-sandbox/airflow-go-worker/storage"
	"github.com/airflow-sandbox/airflow-go-worker/testing/memwatch"
	"github.com/airflow-sandbox/airflow-go-worker/testing/s3server"
	"github.com/airflow-sandbox/airflow-go-worker/testing/storagetest"
)

// BenchmarkPutS3 uploads a generated stream (default 1 GiB; set
// STORAGE_BENCH_BYTES, e.g. 4294967296 or 67108864) to versitygw with
// Handle.Put and with aws-sdk's manager.Uploader (same
// endpoint, part size and concurrency). It reports both rates, their ratio
// and the peak heap and RSS of each. Each iteration runs the pair in both
// orders (direct, put, put, direct).
//
//	go test ./storage/s3 -run '^$' -bench PutS3 -benchtime=1x
func BenchmarkPutS3(b *testing.B) {
	size := int64(1 << 30)
	if v := os.Getenv("STORAGE_BENCH_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			b.Fatalf("STORAGE_BENCH_BYTES=%q is not a positive byte count", v)
		}
		size = n
	}
	srv := s3server.Start(b)
	a := areaOn(b, srv)
	ctx := context.Background()
	direct := manager.NewUploader(srv.Client(), func(u *manager.Uploader) {
		u.PartSize = storage.PartSize
		u.Concurrency = storage.UploadConcurrency
	})
	bucket := a.URL("")[len("s3://") : len(a.URL(""))-1]
	h := a.Handle(b, storage.Options{}) // opened once, as a task's is

	var putDur, directDur time.Duration
	var putMem, directMem memPeak // peaks over all iterations
	// Every upload goes to a key of its own, deleted (untimed) after it:
	// versitygw replacing an existing 1 GiB object took as long again as
	// the upload, and in the runs' fixed order that cost fell on one side
	// more than the other.
	uploads := 0
	key := func(name string) string {
		uploads++
		return fmt.Sprintf("bench/%s-%d", name, uploads)
	}
	remove := func(k string) {
		if _, err := srv.Client().DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(k)}); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		runs := []func(){
			func() {
				k := key("direct")
				syscall.Sync() // the previous upload's write-back must not slow this one
				m := memwatch.Start()
				t0 := time.Now()
				if _, err := direct.Upload(ctx, &s3.PutObjectInput{
					Bucket: aws.String(bucket), Key: aws.String(k),
					Body: storagetest.NewStream(size), ContentType: aws.String("application/octet-stream"),
				}); err != nil {
					b.Fatal(err)
				}
				directDur += time.Since(t0)
				directMem = directMem.max(m.Stop())
				remove(k)
			},
			func() {
				k := key("storage")
				syscall.Sync()
				m := memwatch.Start()
				t0 := time.Now()
				if _, err := h.Put(ctx, a.Loc(b, k), storagetest.NewStream(size)); err != nil {
					b.Fatal(err)
				}
				putDur += time.Since(t0)
				putMem = putMem.max(m.Stop())
				remove(k)
			},
		}
		// Both orders, so neither side always runs on a warmer disk.
		for _, run := range []func(){runs[0], runs[1], runs[1], runs[0]} {
			run()
		}
	}
	b.StopTimer()
	mbps := func(d time.Duration) float64 { return float64(2*size) * float64(b.N) / 1e6 / d.Seconds() }
	b.ReportMetric(mbps(putDur), "put-MB/s")
	b.ReportMetric(mbps(directDur), "direct-MB/s")
	b.ReportMetric(mbps(putDur)/mbps(directDur), "ratio")
	b.ReportMetric(putMem.heapMiB, "put-peak-heap-MiB")
	b.ReportMetric(putMem.rssMiB, "put-peak-rss-MiB")
	b.ReportMetric(directMem.heapMiB, "direct-peak-heap-MiB")
	b.ReportMetric(directMem.rssMiB, "direct-peak-rss-MiB")
}

// memPeak is the highest heap in use and resident set seen during a transfer.
type memPeak struct{ heapMiB, rssMiB float64 }

func (m memPeak) max(p memwatch.Peak) memPeak {
	return memPeak{heapMiB: max(m.heapMiB, float64(p.HeapInuse)/(1<<20)), rssMiB: max(m.rssMiB, float64(p.RSS)/(1<<20))}
}
