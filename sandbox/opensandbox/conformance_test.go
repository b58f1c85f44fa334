package opensandbox_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/opensandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/conformance"
	"github.com/airflow-sandbox/airflow-go-worker/testing/fakeopensandbox"
)

// The driver against the fake server, for every execd build the fake
// imitates and through both ways of reaching execd.
func TestConformance(t *testing.T) {
	for _, version := range fakeopensandbox.Versions {
		for _, proxy := range []bool{true, false} {
			name := "execd " + version + "/" + map[bool]string{true: "ServerProxy", false: "DirectEndpoint"}[proxy]
			t.Run(name, func(t *testing.T) {
				runConformance(t, fakeopensandbox.Options{Version: version}, proxy,
					// The same bytes and code path each time; once is enough.
					version == fakeopensandbox.VersionMain && proxy)
			})
		}
	}
}

// The driver against a real execd (built from OpenSandbox's source, which
// is not part of this repository) behind the fake's lifecycle stand-in:
// OPENSANDBOX_REAL_EXECD=/path/to/execd, in a network namespace with only
// loopback (docs/opensandbox-execd.md says how it was run). CI has no
// such binary and runs the fake's imitations of each build instead.
func TestConformanceRealExecd(t *testing.T) {
	bin := fakeopensandbox.RealExecdBinary()
	if bin == "" {
		t.Skip(fakeopensandbox.RealExecdEnv + " is not set: no real execd to test against")
	}
	fo := fakeopensandbox.Options{ExecdBinary: bin, Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn})}
	for _, proxy := range []bool{true, false} {
		t.Run(map[bool]string{true: "ServerProxy", false: "DirectEndpoint"}[proxy], func(t *testing.T) {
			runConformance(t, fo, proxy, proxy)
		})
	}
	t.Run("Detached", func(t *testing.T) { runDetached(t, fo) })
}

func runConformance(t *testing.T, fo fakeopensandbox.Options, proxy, bigFile bool) {
	var srv *fakeopensandbox.Server
	opts := conformance.Options{
		SupportsTags: true,
		RefusedSpec:  &sandbox.Spec{Network: sandbox.NetworkPolicy{AllowCIDRs: []string{"10.0.0.0/8"}}},
		// Count on the server, not through the driver under test.
		CountProvisioned: func(context.Context, driver.Driver) (int, error) { return len(srv.Sandboxes()), nil },
		// Without a policy the fake, like a server without an egress
		// sidecar, gives the host's network: the no-network test's
		// positive control.
		OpenNetworkReachesTarget: true,
		CallBound:                time.Minute,
	}
	if !bigFile {
		opts.BigFileSize = -1
	}
	conformance.Run(t, func(t *testing.T) driver.Driver {
		e := newEnv(t, fo, func(o *opensandbox.Options) { o.Config.UseServerProxy = proxy })
		srv = e.srv
		return e.drv
	}, opts)
}

// unenforcedEnv asks TestConformanceAgainstUnenforcedPolicy's child run to
// use a fake whose egress sidecar reports policies without enforcing them.
const unenforcedEnv = "OPENSANDBOX_TEST_UNENFORCED_POLICY"

// The conformance suite's no-network test can fail against the fake: with
// a sidecar that reports the policy but does not enforce it (which no
// client can detect) the suite must report the open network.
func TestConformanceNoNetworkCanFail(t *testing.T) {
	if os.Getenv(unenforcedEnv) == "1" {
		runConformance(t, fakeopensandbox.Options{UnenforcedNetworkPolicy: true}, true, false)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestConformanceNoNetworkCanFail$/^NoNetworkByDefault$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), unenforcedEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the no-network test passed against a sandbox with an open network:\n%s", out)
	}
	if !strings.Contains(string(out), "--- FAIL: TestConformanceNoNetworkCanFail/NoNetworkByDefault") || !strings.Contains(string(out), "a default sandbox connected to 127.0.0.1:") {
		t.Fatalf("the child run failed for another reason:\n%s", out)
	}
}

// Detached commands through execd's background commands (the driver's
// Detacher): started through one driver, polled to the end and stopped
// through another on the same server (two workers), for every build the
// fake imitates (and a real execd: TestConformanceRealExecd). execd keeps
// stdout and stderr as one stream.
func TestDetachedConformance(t *testing.T) {
	for _, version := range fakeopensandbox.Versions {
		t.Run("execd "+version, func(t *testing.T) { runDetached(t, fakeopensandbox.Options{Version: version}) })
	}
}

func runDetached(t *testing.T, fo fakeopensandbox.Options) {
	conformance.RunDetached(t, func(t *testing.T) (driver.Driver, driver.Driver) {
		// The first worker reaches execd through the server proxy, the
		// second through its direct endpoint.
		first := newEnv(t, fo, nil)
		second, err := opensandbox.New(opensandbox.Options{
			Config:       opensandbox.Config{Domain: first.srv.Domain, Protocol: "http", APIKey: first.srv.APIKey, RequestTimeout: 10 * time.Second},
			ReadyTimeout: 20 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { second.Close() })
		return first.drv, second
	}, conformance.Options{DetachedCombinedOutput: true, CallBound: time.Minute})
}
