package opensandbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/opensandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/conformance"
	"github.com/airflow-sandbox/airflow-go-worker/testing/fakeopensandbox"
)

// The driver against the fake server, through both ways of reaching execd.
func TestConformance(t *testing.T) {
	for _, proxy := range []bool{true, false} {
		name := map[bool]string{true: "ServerProxy", false: "DirectEndpoint"}[proxy]
		t.Run(name, func(t *testing.T) {
			var srv *fakeopensandbox.Server
			opts := conformance.Options{
				SupportsTags: true,
				RefusedSpec:  &sandbox.Spec{Network: &sandbox.NetworkPolicy{Block: true, AllowCIDRs: []string{"10.0.0.0/8"}}},
				// Count on the server, not through the driver under test.
				CountProvisioned: func(context.Context, sandbox.Driver) (int, error) { return len(srv.Sandboxes()), nil },
				CallBound:        time.Minute,
			}
			if !proxy {
				opts.BigFileSize = -1 // the same bytes and code path; once is enough
			}
			conformance.Run(t, func(t *testing.T) sandbox.Driver {
				e := newEnv(t, fakeopensandbox.Options{}, func(o *opensandbox.Options) { o.Config.UseServerProxy = proxy })
				srv = e.srv
				return e.drv
			}, opts)
		})
	}
}
