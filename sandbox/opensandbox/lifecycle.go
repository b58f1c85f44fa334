package opensandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// APIKeyHeader carries the lifecycle API key.
const APIKeyHeader = "OPEN-SANDBOX-API-KEY"

// Sandbox states the lifecycle server reports. New values may appear; a
// client must tolerate them.
const (
	StatePending    = "Pending"
	StateRunning    = "Running"
	StatePaused     = "Paused"
	StateTerminated = "Terminated"
	StateFailed     = "Failed"
)

// ExecdPort and EgressPort are the in-sandbox ports of execd and of the
// egress sidecar's policy API.
const (
	ExecdPort  = 44772
	EgressPort = 18080
)

// LifecycleClient speaks the lifecycle API at {protocol}://{domain}/v1.
// Every call is bounded by the request timeout.
type LifecycleClient struct {
	base   string // .../v1
	apiKey string
	hc     *http.Client
}

// NewLifecycleClient returns a client for baseURL ("http://host:port", no
// /v1). hc must carry the request timeout.
func NewLifecycleClient(baseURL, apiKey string, hc *http.Client) *LifecycleClient {
	return &LifecycleClient{base: strings.TrimSuffix(baseURL, "/") + "/v1", apiKey: apiKey, hc: hc}
}

// ImageSpec names the image to run.
type ImageSpec struct {
	URI string `json:"uri"`
}

// NetworkRule is one egress rule; first match wins.
type NetworkRule struct {
	Action string `json:"action"` // allow | deny
	Target string `json:"target"` // FQDN, *.wildcard, IP or CIDR
}

// NetworkPolicySpec is the egress policy, at create time and on the sidecar.
type NetworkPolicySpec struct {
	DefaultAction string        `json:"defaultAction,omitempty"`
	Egress        []NetworkRule `json:"egress"`
}

// CreateRequest is the body of POST /sandboxes.
type CreateRequest struct {
	Image          ImageSpec          `json:"image"`
	Entrypoint     []string           `json:"entrypoint"`
	Timeout        int64              `json:"timeout,omitempty"` // seconds, >= 60
	ResourceLimits map[string]string  `json:"resourceLimits"`
	Env            map[string]string  `json:"env,omitempty"`
	Metadata       map[string]string  `json:"metadata,omitempty"`
	NetworkPolicy  *NetworkPolicySpec `json:"networkPolicy,omitempty"`
}

// Status is a sandbox's state.
type Status struct {
	State   string `json:"state"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// SandboxRecord is what the server says about one sandbox.
type SandboxRecord struct {
	ID         string            `json:"id"`
	Image      *ImageSpec        `json:"image,omitempty"`
	Status     Status            `json:"status"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
	ExpiresAt  Timestamp         `json:"expiresAt"`
	CreatedAt  Timestamp         `json:"createdAt"`
}

// Endpoint is where a port of a sandbox is reached, and the headers every
// request to it must carry.
type Endpoint struct {
	Endpoint string            `json:"endpoint"`
	Headers  map[string]string `json:"headers,omitempty"`
}

// URL is the endpoint with protocol prepended when it has no scheme (the
// server never sends one).
func (e Endpoint) URL(protocol string) string {
	ep := strings.TrimSuffix(e.Endpoint, "/")
	if strings.Contains(ep, "://") {
		return ep
	}
	return protocol + "://" + ep
}

// withReachableHost fixes an endpoint whose host is an unspecified address
// (0.0.0.0, [::]): a server without server.eip advertises its bind address,
// which a remote worker cannot dial. The configured server host replaces
// it; through the server proxy the whole host:port is the server's.
func (e Endpoint) withReachableHost(serverDomain string, viaServerProxy bool) Endpoint {
	ep := e.Endpoint
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
		return e
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
	e.Endpoint = scheme + hostport
	if rest != "" {
		e.Endpoint += "/" + rest
	}
	return e
}

// Create posts the sandbox and returns the server's first answer (often
// Pending; poll Get until Running).
func (c *LifecycleClient) Create(ctx context.Context, req CreateRequest) (SandboxRecord, error) {
	var out SandboxRecord
	err := c.do(ctx, "create sandbox", http.MethodPost, "/sandboxes", nil, req, http.StatusAccepted, &out)
	if err == nil && out.ID == "" {
		err = fmt.Errorf("OpenSandbox could not create sandbox: the server answered without a sandbox id; check that the domain points at an OpenSandbox lifecycle server")
	}
	return out, err
}

// Get describes one sandbox. A missing sandbox is an *APIError with NotFound.
func (c *LifecycleClient) Get(ctx context.Context, id string) (SandboxRecord, error) {
	var out SandboxRecord
	err := c.do(ctx, "get sandbox "+id, http.MethodGet, "/sandboxes/"+url.PathEscape(id), nil, nil, http.StatusOK, &out)
	return out, err
}

// ListPageSize is the server's maximum page size.
const ListPageSize = 200

// List returns every sandbox whose metadata includes all of match, reading
// every page. states, when given, are ORed.
func (c *LifecycleClient) List(ctx context.Context, match map[string]string, states ...string) ([]SandboxRecord, error) {
	var all []SandboxRecord
	for page := 1; ; page++ {
		q := url.Values{}
		for _, s := range states {
			q.Add("state", s)
		}
		if len(match) > 0 {
			// The server parses metadata as its own query string, so it
			// is encoded once here and again by q.Encode.
			m := url.Values{}
			for k, v := range match {
				m.Set(k, v)
			}
			q.Set("metadata", m.Encode())
		}
		q.Set("page", strconv.Itoa(page))
		q.Set("pageSize", strconv.Itoa(ListPageSize))
		var out struct {
			Items      []SandboxRecord `json:"items"`
			Pagination struct {
				HasNextPage bool `json:"hasNextPage"`
				TotalPages  int  `json:"totalPages"`
			} `json:"pagination"`
		}
		if err := c.do(ctx, "list sandboxes", http.MethodGet, "/sandboxes", q, nil, http.StatusOK, &out); err != nil {
			return nil, err
		}
		all = append(all, out.Items...)
		if !out.Pagination.HasNextPage || len(out.Items) == 0 || page >= out.Pagination.TotalPages && out.Pagination.TotalPages > 0 {
			return all, nil
		}
	}
}

// PatchMetadata applies a JSON merge patch: a value sets, nil deletes.
func (c *LifecycleClient) PatchMetadata(ctx context.Context, id string, patch map[string]*string) (SandboxRecord, error) {
	var out SandboxRecord
	err := c.do(ctx, "update metadata of sandbox "+id, http.MethodPatch, "/sandboxes/"+url.PathEscape(id)+"/metadata", nil, patch, http.StatusOK, &out)
	return out, err
}

// Delete removes a sandbox. A sandbox that is already gone (404) is not an
// error.
func (c *LifecycleClient) Delete(ctx context.Context, id string) error {
	err := c.do(ctx, "delete sandbox "+id, http.MethodDelete, "/sandboxes/"+url.PathEscape(id), nil, nil, http.StatusNoContent, nil)
	if api, ok := err.(*APIError); ok && api.NotFound() {
		return nil
	}
	return err
}

// Renew moves the sandbox's expiry to at (an absolute time) and returns the
// expiry the server recorded.
func (c *LifecycleClient) Renew(ctx context.Context, id string, at time.Time) (time.Time, error) {
	body := map[string]string{"expiresAt": at.UTC().Format(time.RFC3339)}
	var out struct {
		ExpiresAt Timestamp `json:"expiresAt"`
	}
	err := c.do(ctx, "renew expiration of sandbox "+id, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/renew-expiration", nil, body, http.StatusOK, &out)
	return out.ExpiresAt.Time, err
}

// Endpoint looks up where port is reached; useServerProxy asks for the
// lifecycle server's proxy route instead of a direct address.
func (c *LifecycleClient) Endpoint(ctx context.Context, id string, port int, useServerProxy bool) (Endpoint, error) {
	q := url.Values{}
	if useServerProxy {
		q.Set("use_server_proxy", "true")
	}
	var out Endpoint
	op := fmt.Sprintf("look up port %d of sandbox %s", port, id)
	err := c.do(ctx, op, http.MethodGet, fmt.Sprintf("/sandboxes/%s/endpoints/%d", url.PathEscape(id), port), q, nil, http.StatusOK, &out)
	if err == nil && out.Endpoint == "" {
		err = fmt.Errorf("OpenSandbox could not %s: the server answered with an empty endpoint", op)
	}
	return out, err
}

// do sends one JSON request and decodes the JSON answer into out (nil: the
// body is discarded). Any status other than want is an *APIError;
// transport failures say so.
func (c *LifecycleClient) do(ctx context.Context, op, method, path string, q url.Values, in any, want int, out any) error {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("OpenSandbox could not %s: encoding the request: %v", op, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return fmt.Errorf("OpenSandbox could not %s: %v; check the connection's host and protocol", op, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.apiKey != "" {
		req.Header.Set(APIKeyHeader, c.apiKey)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return transportError(op, err)
	}
	if resp.StatusCode != want && !(want == http.StatusAccepted && resp.StatusCode == http.StatusOK) && !(want == http.StatusNoContent && resp.StatusCode == http.StatusOK) {
		return readAPIError(op, resp)
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out); err != nil {
		return fmt.Errorf("OpenSandbox could not %s: the answer is not the expected JSON (%v); check that the domain points at an OpenSandbox lifecycle server", op, err)
	}
	return nil
}
