package opensandbox

import (
	"github.com/airflow-sandbox/airflow-go-worker/connections"

	"strings"
	"testing"
	"time"
)

func TestConfigFromConnection(t *testing.T) {
	const key = "sk-secret-123"
	tests := []struct {
		name    string
		conn    connections.Connection
		want    Config
		wantErr string // substring; "" = success
	}{
		{
			name: "host only gets defaults",
			conn: connections.Connection{ConnID: "os", Host: "sandbox.internal"},
			want: Config{Domain: "sandbox.internal", Protocol: "http", RequestTimeout: 30 * time.Second, UseServerProxy: true, Source: "os"},
		},
		{
			name: "port, schema, password, extras",
			conn: connections.Connection{ConnID: "os", Host: "sandbox.internal", Port: 8443, Schema: "HTTPS", Password: key,
				Extra: `{"request_timeout": 12.5, "use_server_proxy": false, "unrelated": 1}`},
			want: Config{Domain: "sandbox.internal:8443", Protocol: "https", APIKey: key, RequestTimeout: 12500 * time.Millisecond, UseServerProxy: false, Source: "os"},
		},
		{
			name: "string extras",
			conn: connections.Connection{ConnID: "os", Host: "h", Extra: `{"request_timeout": "5", "use_server_proxy": "no"}`},
			want: Config{Domain: "h", Protocol: "http", RequestTimeout: 5 * time.Second, Source: "os"},
		},
		{
			name: "yes and 1 are true",
			conn: connections.Connection{ConnID: "os", Host: "h", Extra: `{"use_server_proxy": "YES"}`},
			want: Config{Domain: "h", Protocol: "http", RequestTimeout: 30 * time.Second, UseServerProxy: true, Source: "os"},
		},
		{
			name: "scheme in host is accepted like the SDKs",
			conn: connections.Connection{ConnID: "os", Host: "https://h.example", Port: 443},
			want: Config{Domain: "h.example:443", Protocol: "https", RequestTimeout: 30 * time.Second, UseServerProxy: true, Source: "os"},
		},
		{name: "missing host", conn: connections.Connection{ConnID: "os", Password: key}, wantErr: `connection "os" has no host`},
		{name: "bad schema", conn: connections.Connection{ConnID: "os", Host: "h", Schema: "ftp"}, wantErr: `schema "ftp"`},
		{name: "schema conflicts with host scheme", conn: connections.Connection{ConnID: "os", Host: "http://h", Schema: "https"}, wantErr: "keep the protocol in one place"},
		{name: "host with path", conn: connections.Connection{ConnID: "os", Host: "h/v1"}, wantErr: "not a host[:port]"},
		{name: "port twice", conn: connections.Connection{ConnID: "os", Host: "h:1", Port: 2}, wantErr: "already has a port"},
		{name: "zero timeout", conn: connections.Connection{ConnID: "os", Host: "h", Extra: `{"request_timeout": 0}`}, wantErr: "extra request_timeout"},
		{name: "negative timeout", conn: connections.Connection{ConnID: "os", Host: "h", Extra: `{"request_timeout": -3}`}, wantErr: "extra request_timeout"},
		{name: "nan timeout", conn: connections.Connection{ConnID: "os", Host: "h", Extra: `{"request_timeout": "nan"}`}, wantErr: "extra request_timeout"},
		{name: "inf timeout", conn: connections.Connection{ConnID: "os", Host: "h", Extra: `{"request_timeout": "inf"}`}, wantErr: "extra request_timeout"},
		{name: "bool timeout", conn: connections.Connection{ConnID: "os", Host: "h", Extra: `{"request_timeout": true}`}, wantErr: "extra request_timeout"},
		{name: "bad proxy flag", conn: connections.Connection{ConnID: "os", Host: "h", Extra: `{"use_server_proxy": "maybe"}`}, wantErr: `connection "os": extra use_server_proxy`},
		{name: "numeric proxy flag", conn: connections.Connection{ConnID: "os", Host: "h", Extra: `{"use_server_proxy": 1}`}, wantErr: "extra use_server_proxy"},
		{name: "extra not json", conn: connections.Connection{ConnID: "os", Host: "h", Extra: `{`}, wantErr: "extra is not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ConfigFromConnection(tt.conn)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), key) {
					t.Fatalf("error leaks the API key: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestConfigStringHidesKey(t *testing.T) {
	cfg, err := ConfigFromConnection(connections.Connection{ConnID: "os", Host: "h", Password: "sk-do-not-print"})
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.String()
	if strings.Contains(s, "sk-do-not-print") || !strings.Contains(s, "api_key=***") {
		t.Fatalf("String() = %q", s)
	}
	if cfg.BaseURL() != "http://h" {
		t.Fatalf("BaseURL() = %q", cfg.BaseURL())
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Run("domain required", func(t *testing.T) {
		t.Setenv("OPEN_SANDBOX_DOMAIN", "")
		if _, err := ConfigFromEnv(); err == nil || !strings.Contains(err.Error(), "OPEN_SANDBOX_DOMAIN is not set") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("all set", func(t *testing.T) {
		t.Setenv("OPEN_SANDBOX_DOMAIN", "os.example:9000")
		t.Setenv("OPEN_SANDBOX_API_KEY", "k")
		t.Setenv("OPEN_SANDBOX_PROTOCOL", "https")
		got, err := ConfigFromEnv()
		if err != nil {
			t.Fatal(err)
		}
		want := Config{Domain: "os.example:9000", Protocol: "https", APIKey: "k", RequestTimeout: 30 * time.Second, UseServerProxy: true}
		if got != want {
			t.Fatalf("got %+v want %+v", got, want)
		}
	})
	t.Run("protocol defaults to http", func(t *testing.T) {
		t.Setenv("OPEN_SANDBOX_DOMAIN", "d")
		t.Setenv("OPEN_SANDBOX_API_KEY", "")
		t.Setenv("OPEN_SANDBOX_PROTOCOL", "")
		got, err := ConfigFromEnv()
		if err != nil || got.Protocol != "http" || got.APIKey != "" {
			t.Fatalf("got %+v, %v", got, err)
		}
	})
	t.Run("bad protocol", func(t *testing.T) {
		t.Setenv("OPEN_SANDBOX_DOMAIN", "d")
		t.Setenv("OPEN_SANDBOX_PROTOCOL", "gopher")
		if _, err := ConfigFromEnv(); err == nil || !strings.Contains(err.Error(), "OPEN_SANDBOX_PROTOCOL") {
			t.Fatalf("err = %v", err)
		}
	})
}
