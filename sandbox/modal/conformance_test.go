package modal

import (
	"context"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/conformance"
	"github.com/airflow-sandbox/airflow-go-worker/testing/fakemodal"
)

func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("conformance suite streams a big file; run without -short")
	}
	var fakes []*fakemodal.Server
	conformance.Run(t, func(t *testing.T) sandbox.Driver {
		fake, drv := newFake(t, nil)
		fakes = append(fakes, fake)
		t.Cleanup(func() {
			// Runs after the suite's own destroys (cleanups are LIFO).
			assertNoLeak(t, fake)
		})
		return drv
	}, conformance.Options{
		SupportsTags: true,
		RefusedSpec:  &sandbox.Spec{Network: &sandbox.NetworkPolicy{Block: true, AllowHosts: []string{"example.com"}}},
		CountProvisioned: func(ctx context.Context, drv sandbox.Driver) (int, error) {
			return len(fakes[len(fakes)-1].Creates()), nil
		},
	})
}
