//go:build opensandbox_e2e

package opensandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/opensandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/conformance"
	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"
)

// The conformance suite against the real server, through its proxy route
// and through each sandbox's own endpoint. Its no-network test probes a
// listener on the host side of the sandboxes' bridge, which an open
// sandbox reaches (the positive control) and a blocked one must not.
func TestConformance(t *testing.T) {
	d := deploymentFromEnv(t)
	if d.egressMode != "dns+nft" {
		t.Fatalf("the server's egress mode is %q: the suite's no-network test needs dns+nft (TestDNSModeLetsAddressesThrough is the test for dns)", d.egressMode)
	}
	for _, proxy := range []bool{true, false} {
		t.Run(map[bool]string{true: "ServerProxy", false: "DirectEndpoint"}[proxy], func(t *testing.T) {
			conformance.Run(t, func(t *testing.T) driver.Driver { return d.newDriver(t, proxy, nil) }, d.conformanceOptions())
		})
	}
}

func (d deployment) conformanceOptions() conformance.Options {
	return conformance.Options{
		Spec:                     sandbox.Spec{Image: d.image},
		SupportsTags:             true,
		RefusedSpec:              &sandbox.Spec{Image: d.image, Network: sandbox.NetworkPolicy{AllowCIDRs: []string{"10.0.0.0/8"}}},
		ProbeTarget:              d.probeListener,
		OpenNetworkReachesTarget: true,
	}
}

// An image the server has not got is a final error in one try: the
// server answers 500 DOCKER::SANDBOX_IMAGE_PULL_FAILED, which retrying
// does not change, and the message says what to do.
func TestMissingImageIsFinal(t *testing.T) {
	d := deploymentFromEnv(t)
	counter := &countingTransport{}
	drv := d.newDriver(t, true, func(o *opensandbox.Options) { o.Transport = counter })
	ctx := deadline.Context(t)
	before := liveSandboxes(t, drv)
	sb, err := sandbox.NewBackend(drv).Create(ctx, sandbox.Spec{Image: "airflow-go-worker-e2e/not-there:1"})
	if err == nil {
		sb.Destroy(ctx)
		t.Fatal("a sandbox was created from an image the server has not got")
	}
	final := sandbox.IsFinal(err) && !sandbox.IsRetryable(err) && errors.Is(err, sandbox.ErrRejected)
	fmt.Printf("missing image: %s\n", map[bool]string{true: "final", false: "retryable"}[final])
	if !final {
		t.Fatalf("want a final error, got %v", err)
	}
	if !strings.Contains(err.Error(), "not on the OpenSandbox server") || !strings.Contains(err.Error(), "not-there:1") {
		t.Errorf("the error does not say the image is not on the server: %v", err)
	}
	if n := counter.creates.Load(); n != 1 {
		t.Errorf("%d create requests, want 1", n)
	}
	if after := liveSandboxes(t, drv); after != before {
		t.Errorf("%d sandboxes before, %d after a failed create", before, after)
	}
}

// A lifetime over the server's max_sandbox_timeout_seconds is final and
// named as such.
func TestLifetimeCapIsNamed(t *testing.T) {
	d := deploymentFromEnv(t)
	drv := d.newDriver(t, true, nil)
	ctx := deadline.Context(t)
	sb, err := sandbox.NewBackend(drv).Create(ctx, sandbox.Spec{Image: d.image, Lifetime: sandbox.MaxLifetime})
	if err == nil {
		sb.Destroy(ctx)
		t.Skip("the server accepts a 24h lifetime: it has no max_sandbox_timeout_seconds below that")
	}
	if !sandbox.IsFinal(err) || !strings.Contains(err.Error(), "max_sandbox_timeout_seconds") {
		t.Fatalf("want a final error naming max_sandbox_timeout_seconds, got %v", err)
	}
}

func liveSandboxes(t *testing.T, drv *opensandbox.Driver) int {
	t.Helper()
	l, err := sandbox.NewBackend(drv).List(deadline.Context(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	return len(l)
}

// dnsChildEnv asks TestDNSModeLetsAddressesThrough's child run to run the
// no-network test.
const dnsChildEnv = "OPENSANDBOX_E2E_DNS_CHILD"

// Under the server's egress mode dns (its default) the sidecar filters
// names only: a blocked sandbox still connects to an address. The suite's
// no-network test must fail there, and the driver with
// RequireIPEgressEnforcement must refuse the sandbox.
func TestDNSModeLetsAddressesThrough(t *testing.T) {
	d := deploymentFromEnv(t)
	if os.Getenv(dnsChildEnv) == "1" {
		conformance.Run(t, func(t *testing.T) driver.Driver { return d.newDriver(t, true, nil) }, d.conformanceOptions())
		return
	}
	if d.egressMode != "dns" {
		t.Fatalf("the server's egress mode is %q; this test is for a server in mode dns", d.egressMode)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDNSModeLetsAddressesThrough$/^NoNetworkByDefault$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), dnsChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the no-network test passed against a server whose egress mode is dns:\n%s", out)
	}
	if !strings.Contains(string(out), "a default sandbox connected to "+d.probeIP) {
		t.Fatalf("the no-network test failed, but not because a blocked sandbox connected:\n%s", out)
	}
	fmt.Println("egress mode dns: the no-network test fails (a blocked sandbox connected)")

	strict := d.newDriver(t, true, func(o *opensandbox.Options) { o.RequireIPEgressEnforcement = true })
	ctx := deadline.Context(t)
	before := liveSandboxes(t, strict)
	sb, err := sandbox.NewBackend(strict).Create(ctx, sandbox.Spec{Image: d.image})
	if err == nil {
		sb.Destroy(ctx)
		t.Fatal("RequireIPEgressEnforcement: a blocked sandbox was created on a dns-mode server")
	}
	if !errors.Is(err, sandbox.ErrRefused) || !strings.Contains(err.Error(), "dns+nft") {
		t.Fatalf("want a refusal naming dns+nft, got %v", err)
	}
	if after := liveSandboxes(t, strict); after != before {
		t.Errorf("the refused sandbox was left behind: %d before, %d after", before, after)
	}
}
