package local

import (
	"context"
	"os"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
	"github.com/airflow-sandbox/airflow-go-worker/testing/conformance"
)

func TestConformance(t *testing.T) {
	var root string
	var d *Driver
	conformance.Run(t, func(t *testing.T) driver.Driver {
		root = t.TempDir()
		var err error
		d, err = New(Options{Root: root})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}, conformance.Options{
		SupportsTags: true,
		// CIDR allowlists are enforced (egress.go); host allowlists are not.
		RefusedSpec: &sandbox.Spec{Network: sandbox.NetworkPolicy{AllowHosts: []string{"pypi.org"}}},
		// An open network cannot reach the worker's 127.0.0.1 (issue 19):
		// TestOpenNetworkIsPrivate in sandbox/local is the positive control,
		// against a server outside the worker.
		OpenNetworkReachesTarget: false,
		HostWorkdir:              func(id string) string { w, _, _ := d.HostDirs(id); return w },
		// Every directory counts, half-created ones included.
		CountProvisioned: func(ctx context.Context, drv driver.Driver) (int, error) {
			entries, err := os.ReadDir(root)
			return len(entries), err
		},
	})
}

// Detached commands on the local backend (operator opt-in): a keeper runs
// each, and a second driver on the same root (another task process on
// this host) polls and stops it.
func TestDetachedConformance(t *testing.T) {
	t.Setenv(SameHostResumesEnv, "1")
	conformance.RunDetached(t, func(t *testing.T) (driver.Driver, driver.Driver) {
		root := t.TempDir()
		var pair [2]driver.Driver
		for i := range pair {
			d, err := New(Options{Root: root})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			pair[i] = d
		}
		return pair[0], pair[1]
	}, conformance.Options{})
}
