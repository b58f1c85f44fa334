package modal

import (
	"context"
	"io"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	modal "github.com/modal-labs/modal-client/go"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/eventually"
)

// BenchmarkOverhead times create + exec `true` + destroy through the driver
// and through the bare SDK on the same fake, interleaved so both see the
// same machine load, and reports driver/sdk as "ratio" (target <= 1.10).
func BenchmarkOverhead(b *testing.B) {
	fake, drv := newFake(b, nil)
	ctx := context.Background()
	client := drv.client
	app, err := drv.appHandle(ctx)
	if err != nil {
		b.Fatal(err)
	}
	image := client.Images.FromRegistry(DefaultImage, nil)

	viaDriver := func() {
		sb, err := sandbox.NewBackend(drv).Create(ctx, sandbox.Spec{})
		if err != nil {
			b.Fatal(err)
		}
		if res, err := sb.Exec(ctx, "true", sandbox.ExecOptions{}); err != nil || res.ExitCode != 0 {
			b.Fatalf("exec: %+v %v", res, err)
		}
		if err := sb.Destroy(ctx); err != nil {
			b.Fatal(err)
		}
	}
	viaSDK := func() {
		// The same calls the driver makes: tags, name, lifetime, workdir,
		// blocked network; sh -c with a deadline, both outputs read.
		name := sandbox.NewName()
		spec := sandbox.Spec{}.WithDefaults()
		sb, err := client.Sandboxes.Create(ctx, app, image, &modal.SandboxCreateParams{
			Name: name, Timeout: spec.Lifetime, Workdir: spec.Workdir, BlockNetwork: true,
			Tags: sandbox.OwnershipTags(name, spec, time.Now()),
		})
		if err != nil {
			b.Fatal(err)
		}
		p, err := sb.Exec(ctx, []string{"sh", "-c", "true"}, &modal.SandboxExecParams{Timeout: sandbox.DefaultExecTimeout})
		if err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); io.Copy(io.Discard, p.Stdout) }()
		go func() { defer wg.Done(); io.Copy(io.Discard, p.Stderr) }()
		if code, err := p.Wait(ctx, nil); err != nil || code != 0 {
			b.Fatalf("sdk exec: %d %v", code, err)
		}
		wg.Wait()
		if _, err := sb.Terminate(ctx, nil); err != nil {
			b.Fatal(err)
		}
		sb.Detach()
	}
	viaDriver() // warm up connections and the image cache
	viaSDK()
	var tDriver, tSDK []time.Duration
	timed := func(f func(), into *[]time.Duration) {
		start := time.Now()
		f()
		*into = append(*into, time.Since(start))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Alternate which goes first: each leaves a termination running
		// in the background that slows whatever follows it.
		if i%2 == 0 {
			timed(viaSDK, &tSDK)
			timed(viaDriver, &tDriver)
		} else {
			timed(viaDriver, &tDriver)
			timed(viaSDK, &tSDK)
		}
	}
	b.StopTimer()
	// Medians: a shared 2-core machine has outliers either way.
	md, ms := median(tDriver), median(tSDK)
	b.ReportMetric(float64(md.Microseconds())/1000, "driver-ms/op")
	b.ReportMetric(float64(ms.Microseconds())/1000, "sdk-ms/op")
	b.ReportMetric(float64(md)/float64(ms), "ratio")
	assertNoLeak(b, fake)
}

// BenchmarkConcurrent100 creates and destroys 100 sandboxes at once and
// reports what was left behind: sandboxes still running in the fake and
// goroutines above the starting count (targets: 0 and 0).
func BenchmarkConcurrent100(b *testing.B) {
	fake, drv := newFake(b, nil)
	ctx := context.Background()
	warm, err := sandbox.NewBackend(drv).Create(ctx, sandbox.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	warm.Destroy(ctx)
	assertNoLeak(b, fake)
	baseline := settledGoroutines(0, 0)
	b.ResetTimer()
	var leftSandboxes, extraGoroutines int
	for i := 0; i < b.N; i++ {
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for j := 0; j < 100; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sb, err := sandbox.NewBackend(drv).Create(ctx, sandbox.Spec{})
				if err != nil {
					errs <- err
					return
				}
				if _, err := sb.Exec(ctx, "true", sandbox.ExecOptions{}); err != nil {
					errs <- err
				}
				if err := sb.Destroy(ctx); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		b.StopTimer()
		assertNoLeak(b, fake)
		leftSandboxes += len(fake.Sandboxes())
		if n := settledGoroutines(baseline, 10*time.Second) - baseline; n > 0 {
			extraGoroutines += n
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(leftSandboxes)/float64(b.N), "sandboxes-left")
	b.ReportMetric(float64(extraGoroutines)/float64(b.N), "goroutines-left")
}

// settledGoroutines waits (up to wait) for the goroutine count to come
// down to target, then returns it.
func settledGoroutines(target int, wait time.Duration) int {
	n := runtime.NumGoroutine()
	eventually.Within(wait, func() bool { n = runtime.NumGoroutine(); return n <= target })
	return n
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
