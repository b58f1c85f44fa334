package local

import (
	"context"
	"errors"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// The portable layer refuses a spec before Create, and the driver does not
// check again what it guarantees; a caller of the driver's Create that
// bypasses the portable layer (the test emulators back Modal's and
// OpenSandbox's APIs with this driver) still meets the same refusal, so it
// is never given a weaker sandbox than it asked for (issue 30).
func TestCreateCalledDirectlyRefusesWhatThePortableLayerWould(t *testing.T) {
	d, err := New(Options{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	for what, spec := range map[string]sandbox.Spec{
		"a registry image (a static rule)":          {Image: "python:3.12-slim"},
		"the workdir /tmp (a static rule)":          {Workdir: "/tmp"},
		"GPUs (beyond the capabilities)":            {GPU: "A10G"},
		"a cpu limit (beyond the capabilities)":     {CPU: 2},
		"host allowlists (beyond the capabilities)": {Network: sandbox.NetworkPolicy{AllowHosts: []string{"pypi.org"}}},
		"a negative lifetime (Validate)":            {Lifetime: -1},
	} {
		if _, err := d.Create(ctx, sandbox.NewName(), spec); !errors.Is(err, sandbox.ErrRefused) {
			t.Errorf("%s, asked directly: want a refusal, got %v", what, err)
		}
	}
	if list, err := d.ListSandboxes(ctx, nil); err != nil || len(list) != 0 {
		t.Fatalf("refused specs left sandboxes: %v, %v", list, err)
	}
	// The same driver creates what it can give, asked directly, and
	// through the portable layer, whose stamped spec it does not check
	// again.
	if _, err := d.Create(ctx, sandbox.NewName(), sandbox.Spec{}); err != nil {
		t.Fatalf("a plain spec, asked directly: %v", err)
	}
	if _, err := sandbox.NewBackend(d).Create(ctx, sandbox.Spec{}); err != nil {
		t.Fatalf("a plain spec, through the portable layer: %v", err)
	}
}
