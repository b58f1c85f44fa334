package gcs

import (
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
)

func TestFromConnection(t *testing.T) {
	key := `{"type": "service_account", "client_email": "sa@p.iam.gserviceaccount.com", "private_key": "-----BEGIN PRIVATE KEY-----\nSECRETKEY\n-----END PRIVATE KEY-----\n"}`
	ok := []struct {
		name string
		c    connections.Connection
		want func(Config) bool
	}{
		{"keyfile_dict as a string", connections.Connection{ConnType: "google_cloud_platform", Extra: `{"keyfile_dict": ` + quote(key) + `, "project": "p1"}`},
			func(g Config) bool {
				return strings.Contains(string(g.KeyfileJSON), "service_account") && g.Project == "p1"
			}},
		{"keyfile_dict as an object", connections.Connection{ConnType: "google_cloud_platform", Extra: `{"keyfile_dict": ` + key + `}`},
			func(g Config) bool { return strings.Contains(string(g.KeyfileJSON), `"type":"service_account"`) }},
		{"old prefixed extras", connections.Connection{ConnType: "google_cloud_platform", Extra: `{"extra__google_cloud_platform__key_path": "/keys/sa.json", "extra__google_cloud_platform__project": "p2"}`},
			func(g Config) bool { return g.KeyPath == "/keys/sa.json" && g.Project == "p2" }},
		{"none: application default credentials", connections.Connection{ConnType: "google_cloud_platform"},
			func(g Config) bool { return !g.HasKey() && !g.Anonymous }},
		{"emulator", connections.Connection{ConnType: "google_cloud_platform", Extra: `{"is_anonymous": true, "gcs.endpoint": "http://127.0.0.1:4443", "scope": "a, b"}`},
			func(g Config) bool {
				return g.Anonymous && g.Endpoint == "http://127.0.0.1:4443" && len(g.Scopes) == 2 && g.Scopes[1] == "b"
			}},
		{"credential_config_file contents", connections.Connection{ConnType: "google_cloud_platform", Extra: `{"credential_config_file": "{\"type\": \"external_account\"}"}`},
			func(g Config) bool { return strings.Contains(string(g.KeyfileJSON), "external_account") }},
	}
	for _, tt := range ok {
		tt.c.ConnID = "gcp"
		g, err := FromConnection(tt.c)
		if err != nil || !tt.want(g) {
			t.Errorf("%s: got %+v, %v", tt.name, g, err)
		}
		if strings.Contains(g.String(), "SECRETKEY") {
			t.Errorf("%s: String leaks the key: %s", tt.name, g)
		}
	}
	bad := []struct{ name, connType, extra, want string }{
		{"both keys", "google_cloud_platform", `{"keyfile_dict": ` + quote(key) + `, "key_path": "/k.json"}`, "mutually exclusive"},
		{"broken JSON", "google_cloud_platform", `{"keyfile_dict": "{not json"}`, "not valid JSON"},
		{"no type", "google_cloud_platform", `{"keyfile_dict": "{\"a\": 1}"}`, `no "type"`},
		{"impersonation", "google_cloud_platform", `{"impersonation_chain": "sa@x"}`, "impersonation_chain is not supported"},
		{"bad endpoint", "google_cloud_platform", `{"gcs.endpoint": "127.0.0.1:4443"}`, "not an http(s) URL"},
	}
	for _, tt := range bad {
		_, err := FromConnection(connections.Connection{ConnID: "gcp", ConnType: tt.connType, Extra: tt.extra})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: want %q, got %v", tt.name, tt.want, err)
		}
		if err != nil && strings.Contains(err.Error(), "SECRETKEY") {
			t.Errorf("%s: error leaks the key: %v", tt.name, err)
		}
	}
}

func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}
