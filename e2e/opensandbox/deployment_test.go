//go:build opensandbox_e2e

// Package opensandbox runs the OpenSandbox backend against a real
// OpenSandbox lifecycle server (opensandbox-server) on Docker: the
// conformance suite through both ways of reaching execd, a create with an
// image the server has not got, a lifetime over the server's cap, and the
// standard binary's provision -> run -> export -> destroy. `make
// opensandbox-e2e` (scripts/opensandbox-e2e.sh) sets up the deployment and
// runs it; `make test` does not, as the build tag keeps it out. The
// deployment is named by the environment (deployment below), so the same
// tests run against an operator's own server (docs/backends.md).
package opensandbox

import (
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/opensandbox"
)

// Environment variables naming the deployment under test.
const (
	envDomain  = "OPENSANDBOX_E2E_DOMAIN"   // host:port of the lifecycle server
	envAPIKey  = "OPENSANDBOX_E2E_API_KEY"  // its API key
	envImage   = "OPENSANDBOX_E2E_IMAGE"    // an image it has, with bash and coreutils
	envProbeIP = "OPENSANDBOX_E2E_PROBE_IP" // an address of this host an open sandbox reaches
	envMode    = "OPENSANDBOX_E2E_EGRESS_MODE"
)

// deployment is the server under test.
type deployment struct {
	domain, apiKey, image, probeIP, egressMode string
}

func deploymentFromEnv(t *testing.T) deployment {
	t.Helper()
	d := deployment{
		domain: os.Getenv(envDomain), apiKey: os.Getenv(envAPIKey), image: os.Getenv(envImage),
		probeIP: os.Getenv(envProbeIP), egressMode: os.Getenv(envMode),
	}
	var missing []string
	for name, v := range map[string]string{envDomain: d.domain, envImage: d.image, envProbeIP: d.probeIP, envMode: d.egressMode} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%s not set: run these tests through make opensandbox-e2e, which sets up a deployment, or name your own (docs/backends.md)", strings.Join(missing, ", "))
	}
	return d
}

// newDriver is a driver for the deployment; proxy routes execd traffic
// through the server's proxy route, else to the sandbox's own endpoint.
func (d deployment) newDriver(t *testing.T, proxy bool, tweak func(*opensandbox.Options)) *opensandbox.Driver {
	t.Helper()
	opts := opensandbox.Options{
		Config: opensandbox.Config{Domain: d.domain, Protocol: "http", APIKey: d.apiKey,
			RequestTimeout: 30 * time.Second, UseServerProxy: proxy},
		ReadyTimeout: 2 * time.Minute,
		Image:        d.image,
	}
	if tweak != nil {
		tweak(&opts)
	}
	drv, err := opensandbox.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	return drv
}

// probeListener listens on the probe address: the host side of the
// sandboxes' bridge, which a sandbox without a policy reaches.
func (d deployment) probeListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(d.probeIP, "0"))
	if err != nil {
		t.Fatalf("listening on the probe address %s (%s): %v", d.probeIP, envProbeIP, err)
	}
	return ln
}

// countingTransport counts the requests that create a sandbox.
type countingTransport struct {
	creates atomic.Int32
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/sandboxes") {
		c.creates.Add(1)
	}
	return http.DefaultTransport.RoundTrip(r)
}
