package opensandbox

import (
	"github.com/airflow-sandbox/airflow-go-worker/connections"

	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// DefaultConnID is the connection id the Python provider uses
// when none is given.
const DefaultConnID = "opensandbox_default"

// Defaults shared with the Python provider and the OpenSandbox SDKs.
const (
	DefaultRequestTimeout = 30 * time.Second
	DefaultProtocol       = "http"
)

// Config is how to reach an OpenSandbox lifecycle server.
// Domain is "host" or "host:port" (no scheme); Protocol is http or https.
// An empty APIKey means the server runs without authentication.
type Config struct {
	Domain         string
	Protocol       string
	APIKey         string
	RequestTimeout time.Duration
	// UseServerProxy routes execd traffic through the lifecycle server's
	// /sandboxes/{id}/proxy/{port} route, for workers that cannot reach
	// sandbox ports directly.
	UseServerProxy bool
	Source         string // the connection it was read from; "" = the environment
}

// BaseURL is "{protocol}://{domain}", without the /v1 suffix.
func (c Config) BaseURL() string { return c.Protocol + "://" + c.Domain }

// String never includes the API key, so a config can be logged safely.
func (c Config) String() string {
	key := "none"
	if c.APIKey != "" {
		key = "***"
	}
	src := c.Source
	if src == "" {
		src = "env"
	}
	return fmt.Sprintf("Config(%s %s api_key=%s request_timeout=%v use_server_proxy=%t)",
		src, c.BaseURL(), key, c.RequestTimeout, c.UseServerProxy)
}

// ConfigFromConnection reads an OpenSandbox connection the way the
// Python provider does: host (required, so nothing silently falls back to
// localhost), optional port, schema as the protocol (default http), password
// as the API key, extras request_timeout (seconds, default 30) and
// use_server_proxy (default true). Other extras are ignored. Errors name the
// connection and the field, never the key.
func ConfigFromConnection(c connections.Connection) (Config, error) {
	cfg := Config{
		APIKey:         c.Password,
		RequestTimeout: DefaultRequestTimeout,
		UseServerProxy: true,
		Source:         c.ConnID,
	}
	host := strings.TrimSpace(c.Host)
	if host == "" {
		return Config{}, fmt.Errorf("connection %q has no host; set it to the OpenSandbox server's host name (and port), e.g. opensandbox.internal with port 8080", c.ConnID)
	}
	proto, host, err := splitScheme(host)
	if err != nil {
		return Config{}, fmt.Errorf("connection %q: host: %v", c.ConnID, err)
	}
	schema := strings.ToLower(strings.TrimSpace(c.Schema))
	switch {
	case schema != "" && proto != "" && schema != proto:
		return Config{}, fmt.Errorf("connection %q: host says %s:// but schema says %q; keep the protocol in one place", c.ConnID, proto, schema)
	case schema != "":
		proto = schema
	case proto == "":
		proto = DefaultProtocol
	}
	if proto != "http" && proto != "https" {
		return Config{}, fmt.Errorf("connection %q: schema %q is not a protocol OpenSandbox speaks; use http or https", c.ConnID, c.Schema)
	}
	cfg.Protocol = proto
	if c.Port != 0 {
		if c.Port < 0 || c.Port > 65535 {
			return Config{}, fmt.Errorf("connection %q: port %d is out of range 1-65535", c.ConnID, c.Port)
		}
		if strings.Contains(host, ":") && !strings.HasSuffix(host, "]") {
			return Config{}, fmt.Errorf("connection %q: host %q already has a port and the port field says %d; keep only one", c.ConnID, host, c.Port)
		}
		host += ":" + strconv.Itoa(c.Port)
	}
	cfg.Domain = host

	extra, err := c.ExtraMap()
	if err != nil {
		return Config{}, err
	}
	if v, ok := extra["request_timeout"]; ok && v != nil {
		secs, ok := seconds(v)
		if !ok {
			return Config{}, fmt.Errorf("connection %q: extra request_timeout %v is not a positive number of seconds; use e.g. 30", c.ConnID, v)
		}
		cfg.RequestTimeout = time.Duration(secs * float64(time.Second))
	}
	if v, ok := extra["use_server_proxy"]; ok && v != nil {
		b, ok := boolValue(v)
		if !ok {
			return Config{}, fmt.Errorf("connection %q: extra use_server_proxy %v is not a boolean; use true or false", c.ConnID, v)
		}
		cfg.UseServerProxy = b
	}
	return cfg, nil
}

// ConfigFromEnv reads OPEN_SANDBOX_DOMAIN (required), OPEN_SANDBOX_API_KEY
// and OPEN_SANDBOX_PROTOCOL, as the OpenSandbox SDKs do when no connection is
// configured. Unlike the SDKs it never falls back to localhost:8080.
func ConfigFromEnv() (Config, error) {
	domain := strings.TrimSpace(os.Getenv("OPEN_SANDBOX_DOMAIN"))
	if domain == "" {
		return Config{}, fmt.Errorf("OPEN_SANDBOX_DOMAIN is not set; set it to the OpenSandbox server's host:port, or configure the %s connection", DefaultConnID)
	}
	proto, domain, err := splitScheme(domain)
	if err != nil {
		return Config{}, fmt.Errorf("OPEN_SANDBOX_DOMAIN: %v", err)
	}
	envProto := strings.ToLower(strings.TrimSpace(os.Getenv("OPEN_SANDBOX_PROTOCOL")))
	switch {
	case envProto != "" && proto != "" && envProto != proto:
		return Config{}, fmt.Errorf("OPEN_SANDBOX_DOMAIN says %s:// but OPEN_SANDBOX_PROTOCOL says %q; keep the protocol in one place", proto, envProto)
	case envProto != "":
		proto = envProto
	case proto == "":
		proto = DefaultProtocol
	}
	if proto != "http" && proto != "https" {
		return Config{}, fmt.Errorf("OPEN_SANDBOX_PROTOCOL %q is not a protocol OpenSandbox speaks; use http or https", envProto)
	}
	return Config{
		Domain:         domain,
		Protocol:       proto,
		APIKey:         os.Getenv("OPEN_SANDBOX_API_KEY"),
		RequestTimeout: DefaultRequestTimeout,
		UseServerProxy: true,
	}, nil
}

// splitScheme accepts "host[:port]" and, like the SDKs, "http(s)://host[:port]".
// It returns the scheme ("" when absent) and the bare domain.
func splitScheme(s string) (scheme, domain string, err error) {
	domain = s
	if i := strings.Index(s, "://"); i >= 0 {
		scheme, domain = strings.ToLower(s[:i]), s[i+3:]
		if scheme != "http" && scheme != "https" {
			return "", "", fmt.Errorf("%q has scheme %q; use http or https", s, scheme)
		}
	}
	domain = strings.TrimSuffix(domain, "/")
	if domain == "" || strings.ContainsAny(domain, "/?#@ ") {
		return "", "", fmt.Errorf("%q is not a host[:port] such as opensandbox.internal:8080 (no path, no credentials)", s)
	}
	return scheme, domain, nil
}

// seconds accepts a JSON number or a numeric string, as Python's
// float() does, and requires a positive finite value.
func seconds(v any) (float64, bool) {
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case string:
		var err error
		if f, err = strconv.ParseFloat(strings.TrimSpace(x), 64); err != nil {
			return 0, false
		}
	default:
		return 0, false
	}
	if math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 || f > float64(math.MaxInt64)/float64(time.Second) {
		return 0, false
	}
	return f, true
}

// boolValue accepts a JSON bool or true/false/1/0/yes/no strings.
func boolValue(v any) (bool, bool) {
	switch x := v.(type) {
	case bool:
		return x, true
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "true", "1", "yes":
			return true, true
		case "false", "0", "no":
			return false, true
		}
	}
	return false, false
}
