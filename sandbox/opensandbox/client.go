package opensandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	osdk "github.com/alibaba/OpenSandbox/sdks/sandbox/go"
)

// ExecdPort and EgressPort are the in-sandbox ports of execd and of the
// egress sidecar's policy API.
const (
	ExecdPort  = osdk.DefaultExecdPort
	EgressPort = osdk.DefaultEgressPort
)

// transferBuffer is the size of the HTTP transport's read and write
// buffers.
const transferBuffer = 256 << 10

// ListPageSize is the server's maximum page size.
const ListPageSize = 200

// newHTTPClient is the one HTTP client every SDK client of a driver
// shares (one connection pool for the lifecycle server, execd and the
// egress sidecars). The SDK sets the request timeout on its own copy for
// unary calls and clears it for streams and transfers, which ctx bounds.
func newHTTPClient(opts Options) *http.Client {
	base := opts.Transport
	if base == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 16
		// Transfers go through these buffers: with the default 4 KiB, a
		// 200 MiB upload was 50,000 writes and took a third longer than
		// curl's (issue 39).
		tr.WriteBufferSize, tr.ReadBufferSize = transferBuffer, transferBuffer
		base = tr
	}
	return &http.Client{Transport: &guardTransport{base: base, stall: opts.StallTimeout}}
}

// sdkOptions are the options every SDK client is built with.
func (d *Driver) sdkOptions(headers map[string]string) []osdk.Option {
	opts := []osdk.Option{osdk.WithHTTPClient(d.hc), osdk.WithTimeout(d.cfg.RequestTimeout)}
	if len(headers) > 0 {
		opts = append(opts, osdk.WithHeaders(headers))
	}
	return opts
}

// lifecycle is the SDK's lifecycle client, built at the first call. It
// keeps no endpoint cache: the driver keeps one execd client per sandbox
// and drops it when its endpoint stops answering.
func (d *Driver) lifecycle() *osdk.LifecycleClient {
	d.lifeOnce.Do(func() {
		d.life = osdk.NewLifecycleClientWithCache(d.cfg.BaseURL()+"/"+osdk.APIVersion, d.cfg.APIKey, nil, d.sdkOptions(nil)...)
	})
	return d.life
}

func notFound(err error) bool {
	var api *APIError
	return errors.As(err, &api) && api.NotFound()
}

func (d *Driver) getSandbox(ctx context.Context, id string) (*osdk.SandboxInfo, error) {
	rec, err := d.lifecycle().GetSandbox(ctx, id)
	return rec, callError("get sandbox "+id, err)
}

// listSandboxes returns every sandbox whose metadata includes all of match,
// reading every page.
func (d *Driver) listSandboxes(ctx context.Context, match map[string]string) ([]osdk.SandboxInfo, error) {
	var all []osdk.SandboxInfo
	for page := 1; ; page++ {
		out, err := d.lifecycle().ListSandboxes(ctx, osdk.ListOptions{Metadata: match, Page: page, PageSize: ListPageSize})
		if err != nil {
			return nil, callError("list sandboxes", err)
		}
		all = append(all, out.Items...)
		p := out.Pagination
		if !p.HasNextPage || len(out.Items) == 0 || p.TotalPages > 0 && page >= p.TotalPages {
			return all, nil
		}
	}
}

// deleteSandbox removes a sandbox; one already gone (404) is not an error.
func (d *Driver) deleteSandbox(ctx context.Context, id string) error {
	err := callError("delete sandbox "+id, d.lifecycle().DeleteSandbox(ctx, id))
	if notFound(err) {
		return nil
	}
	return err
}

// endpoint looks up where port of a sandbox is reached (through the
// server's proxy when configured) and the headers each request needs.
func (d *Driver) endpoint(ctx context.Context, id string, port int) (string, map[string]string, error) {
	var proxy *bool
	if d.cfg.UseServerProxy {
		proxy = &d.cfg.UseServerProxy
	}
	op := fmt.Sprintf("look up port %d of sandbox %s", port, id)
	ep, err := d.lifecycle().GetEndpoint(ctx, id, port, proxy)
	if err != nil {
		return "", nil, callError(op, err)
	}
	if ep.Endpoint == "" {
		return "", nil, fmt.Errorf("OpenSandbox could not %s: the server answered with an empty endpoint", op)
	}
	u := reachableHost(ep.Endpoint, d.cfg.Domain, d.cfg.UseServerProxy)
	if !strings.Contains(u, "://") {
		u = d.cfg.Protocol + "://" + u // the server never sends a scheme
	}
	return strings.TrimSuffix(u, "/"), ep.Headers, nil
}

// reachableHost fixes an endpoint whose host is an unspecified address
// (0.0.0.0, [::]): a server without server.eip advertises its bind address,
// which a remote worker cannot dial. The configured server host replaces
// it; through the server proxy the whole host:port is the server's.
func reachableHost(endpoint, serverDomain string, viaServerProxy bool) string {
	ep := endpoint
	scheme := ""
	if i := strings.Index(ep, "://"); i >= 0 {
		scheme, ep = ep[:i+3], ep[i+3:]
	}
	hostport, rest, _ := strings.Cut(ep, "/")
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, ""
	}
	if ip := net.ParseIP(strings.Trim(host, "[]")); ip == nil || !ip.IsUnspecified() {
		return endpoint
	}
	switch {
	case viaServerProxy || port == "":
		hostport = serverDomain
	default:
		serverHost, _, err := net.SplitHostPort(serverDomain)
		if err != nil {
			serverHost = serverDomain
		}
		hostport = net.JoinHostPort(strings.Trim(serverHost, "[]"), port)
	}
	out := scheme + hostport
	if rest != "" {
		out += "/" + rest
	}
	return out
}

// egressPolicy reads the policy the sandbox's egress sidecar enforces.
func (d *Driver) egressPolicy(ctx context.Context, id string) (*osdk.PolicyStatusResponse, error) {
	u, headers, err := d.endpoint(ctx, id, EgressPort)
	if err != nil {
		return nil, err
	}
	// The endpoint's headers carry the sidecar's token, if it has one.
	p, err := osdk.NewEgressClient(u, "", d.sdkOptions(headers)...).GetPolicy(ctx)
	return p, callError("read the egress policy", err)
}
