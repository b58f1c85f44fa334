package modal

import (
	"context"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
	"github.com/airflow-sandbox/airflow-go-worker/testing/conformance"
	"github.com/airflow-sandbox/airflow-go-worker/testing/fakemodal"
)

func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("conformance suite streams a big file; run without -short")
	}
	var fakes []*fakemodal.Server
	conformance.Run(t, func(t *testing.T) driver.Driver {
		fake, drv := newFake(t, nil)
		fakes = append(fakes, fake)
		t.Cleanup(func() {
			// Runs after the suite's own destroys (cleanups are LIFO).
			assertNoLeak(t, fake)
		})
		return drv
	}, conformance.Options{
		SupportsTags: true,
		// The SDK opens its gRPC streams with a fixed 64 MiB receive window,
		// so the server may push up to 64 MiB of a file ahead of the reader
		// (the fake runs in this process too): a streaming driver peaks near
		// that plus chunks in flight and GC slack, and measured 40-72 MiB
		// against the default 64 MiB bound. 128 MiB still fails a driver that
		// buffers the 256 MiB file whole.
		MaxHeapGrowth: 128 << 20,
		RefusedSpec:   &sandbox.Spec{Network: sandbox.NetworkPolicy{AllowHosts: []string{"example.com"}}},
		CountProvisioned: func(ctx context.Context, drv driver.Driver) (int, error) {
			return len(fakes[len(fakes)-1].Creates()), nil
		},
	})
}

// Detached commands through the portable wrapper: started through one
// driver, polled to the end through another (a resume on another
// worker); the fake keeps what an exec leaves in the background running
// until the sandbox ends, as a Modal container does.
func TestDetachedConformance(t *testing.T) {
	conformance.RunDetached(t, func(t *testing.T) (driver.Driver, driver.Driver) {
		fake, first := newFake(t, nil)
		t.Cleanup(func() { assertNoLeak(t, fake) })
		second, err := New(context.Background(), Options{
			Credentials: Credentials{TokenID: fake.TokenID(), TokenSecret: fake.TokenSecret(), Source: "modal_test"},
			RetryDelay:  10e6,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { second.Close() })
		return first, second
	}, conformance.Options{})
}
