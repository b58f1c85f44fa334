package connections

import (
	"strings"
	"testing"
)

func TestGCPFromConnection(t *testing.T) {
	key := `{"type": "service_account", "client_email": "sa@p.iam.gserviceaccount.com", "private_key": "-----BEGIN PRIVATE KEY-----\nSECRETKEY\n-----END PRIVATE KEY-----\n"}`
	ok := []struct {
		name string
		c    Connection
		want func(GCPConfig) bool
	}{
		{"keyfile_dict as a string", Connection{ConnType: "google_cloud_platform", Extra: `{"keyfile_dict": ` + quote(key) + `, "project": "p1"}`},
			func(g GCPConfig) bool {
				return strings.Contains(string(g.KeyfileJSON), "service_account") && g.Project == "p1"
			}},
		{"keyfile_dict as an object", Connection{ConnType: "google_cloud_platform", Extra: `{"keyfile_dict": ` + key + `}`},
			func(g GCPConfig) bool { return strings.Contains(string(g.KeyfileJSON), `"type":"service_account"`) }},
		{"old prefixed extras", Connection{ConnType: "google_cloud_platform", Extra: `{"extra__google_cloud_platform__key_path": "/keys/sa.json", "extra__google_cloud_platform__project": "p2"}`},
			func(g GCPConfig) bool { return g.KeyPath == "/keys/sa.json" && g.Project == "p2" }},
		{"none: application default credentials", Connection{ConnType: "google_cloud_platform"},
			func(g GCPConfig) bool { return !g.HasKey() && !g.Anonymous }},
		{"emulator", Connection{ConnType: "google_cloud_platform", Extra: `{"is_anonymous": true, "gcs.endpoint": "http://127.0.0.1:4443", "scope": "a, b"}`},
			func(g GCPConfig) bool {
				return g.Anonymous && g.Endpoint == "http://127.0.0.1:4443" && len(g.Scopes) == 2 && g.Scopes[1] == "b"
			}},
		{"credential_config_file contents", Connection{ConnType: "google_cloud_platform", Extra: `{"credential_config_file": "{\"type\": \"external_account\"}"}`},
			func(g GCPConfig) bool { return strings.Contains(string(g.KeyfileJSON), "external_account") }},
	}
	for _, tt := range ok {
		tt.c.ConnID = "gcp"
		g, err := GCPFromConnection(tt.c)
		if err != nil || !tt.want(g) {
			t.Errorf("%s: got %+v, %v", tt.name, g, err)
		}
		if strings.Contains(g.String(), "SECRETKEY") {
			t.Errorf("%s: String leaks the key: %s", tt.name, g)
		}
	}
	bad := []struct{ name, connType, extra, want string }{
		{"wrong type", "aws", ``, `has type "aws", not google_cloud_platform`},
		{"both keys", "google_cloud_platform", `{"keyfile_dict": ` + quote(key) + `, "key_path": "/k.json"}`, "mutually exclusive"},
		{"broken JSON", "google_cloud_platform", `{"keyfile_dict": "{not json"}`, "not valid JSON"},
		{"no type", "google_cloud_platform", `{"keyfile_dict": "{\"a\": 1}"}`, `no "type"`},
		{"impersonation", "google_cloud_platform", `{"impersonation_chain": "sa@x"}`, "impersonation_chain is not supported"},
		{"bad endpoint", "google_cloud_platform", `{"gcs.endpoint": "127.0.0.1:4443"}`, "not an http(s) URL"},
	}
	for _, tt := range bad {
		_, err := GCPFromConnection(Connection{ConnID: "gcp", ConnType: tt.connType, Extra: tt.extra})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: want %q, got %v", tt.name, tt.want, err)
		}
		if err != nil && strings.Contains(err.Error(), "SECRETKEY") {
			t.Errorf("%s: error leaks the key: %v", tt.name, err)
		}
	}
}

func TestAzureFromConnection(t *testing.T) {
	ok := []struct {
		name string
		c    Connection
		want AzureConfig
	}{
		{"account and key", Connection{Login: "acct", Password: "S0VZ"},
			AzureConfig{AccountName: "acct", AccountURL: "https://acct.blob.core.windows.net/", AccountKey: "S0VZ"}},
		{"account URL in host (Azurite)", Connection{Host: "http://127.0.0.1:10000/devstoreaccount1", Password: "S0VZ"},
			AzureConfig{AccountName: "devstoreaccount1", AccountURL: "http://127.0.0.1:10000/devstoreaccount1", AccountKey: "S0VZ"}},
		{"host name only", Connection{Host: "acct.blob.core.windows.net", Extra: `{"shared_access_key": "S0VZ"}`},
			AzureConfig{AccountName: "acct", AccountURL: "https://acct.blob.core.windows.net", AccountKey: "S0VZ"}},
		{"SAS token", Connection{Login: "acct", Extra: `{"sas_token": "?sv=2024&sig=SIGSECRET"}`},
			AzureConfig{AccountName: "acct", AccountURL: "https://acct.blob.core.windows.net/", SASToken: "sv=2024&sig=SIGSECRET"}},
		{"SAS account URL", Connection{Extra: `{"extra__wasb__sas_token": "https://acct.blob.core.windows.net/?sv=2024&sig=SIGSECRET"}`},
			AzureConfig{AccountName: "acct", AccountURL: "https://acct.blob.core.windows.net/", SASToken: "sv=2024&sig=SIGSECRET"}},
		{"connection string wins", Connection{Login: "other", Password: "x", Extra: `{"connection_string": "AccountName=a;AccountKey=S0VZ;BlobEndpoint=http://127.0.0.1:1/a"}`},
			AzureConfig{ConnectionString: "AccountName=a;AccountKey=S0VZ;BlobEndpoint=http://127.0.0.1:1/a"}},
	}
	for _, tt := range ok {
		tt.c.ConnID, tt.c.ConnType = "az", "wasb"
		got, err := AzureFromConnection(tt.c)
		if err != nil || got != tt.want {
			t.Errorf("%s: got %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
		for _, secret := range []string{"S0VZ", "SIGSECRET"} {
			if strings.Contains(got.String(), secret) {
				t.Errorf("%s: String leaks a secret: %s", tt.name, got)
			}
		}
	}
	bad := []struct {
		name string
		c    Connection
		want string
	}{
		{"wrong type", Connection{ConnType: "aws", Login: "a", Password: "k"}, `has type "aws", not wasb`},
		{"no account", Connection{ConnType: "wasb", Password: "k"}, "names no storage account"},
		{"no credentials", Connection{ConnType: "wasb", Login: "acct"}, "has no credentials"},
		{"Azure AD", Connection{ConnType: "wasb", Login: "app", Password: "secret", Extra: `{"tenant_id": "t"}`}, "tenant_id (Azure AD sign-in) is not supported"},
		{"broken connection string", Connection{ConnType: "wasb", Extra: `{"connection_string": "garbage"}`}, "not an Azure storage connection string"},
	}
	for _, tt := range bad {
		tt.c.ConnID = "az"
		_, err := AzureFromConnection(tt.c)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: want %q, got %v", tt.name, tt.want, err)
		}
	}
}

func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}
