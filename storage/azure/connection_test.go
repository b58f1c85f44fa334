package azure

import (
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
)

func TestFromConnection(t *testing.T) {
	ok := []struct {
		name string
		c    connections.Connection
		want Config
	}{
		{"account and key", connections.Connection{Login: "acct", Password: "S0VZ"},
			Config{AccountName: "acct", AccountURL: "https://acct.blob.core.windows.net/", AccountKey: "S0VZ"}},
		{"account URL in host (Azurite)", connections.Connection{Host: "http://127.0.0.1:10000/devstoreaccount1", Password: "S0VZ"},
			Config{AccountName: "devstoreaccount1", AccountURL: "http://127.0.0.1:10000/devstoreaccount1", AccountKey: "S0VZ"}},
		{"host name only", connections.Connection{Host: "acct.blob.core.windows.net", Extra: `{"shared_access_key": "S0VZ"}`},
			Config{AccountName: "acct", AccountURL: "https://acct.blob.core.windows.net", AccountKey: "S0VZ"}},
		{"SAS token", connections.Connection{Login: "acct", Extra: `{"sas_token": "?sv=2024&sig=SIGSECRET"}`},
			Config{AccountName: "acct", AccountURL: "https://acct.blob.core.windows.net/", SASToken: "sv=2024&sig=SIGSECRET"}},
		{"SAS account URL", connections.Connection{Extra: `{"extra__wasb__sas_token": "https://acct.blob.core.windows.net/?sv=2024&sig=SIGSECRET"}`},
			Config{AccountName: "acct", AccountURL: "https://acct.blob.core.windows.net/", SASToken: "sv=2024&sig=SIGSECRET"}},
		{"connection string wins", connections.Connection{Login: "other", Password: "x", Extra: `{"connection_string": "AccountName=a;AccountKey=S0VZ;BlobEndpoint=http://127.0.0.1:1/a"}`},
			Config{ConnectionString: "AccountName=a;AccountKey=S0VZ;BlobEndpoint=http://127.0.0.1:1/a"}},
	}
	for _, tt := range ok {
		tt.c.ConnID, tt.c.ConnType = "az", "wasb"
		got, err := FromConnection(tt.c)
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
		c    connections.Connection
		want string
	}{
		{"no account", connections.Connection{ConnType: "wasb", Password: "k"}, "names no storage account"},
		{"no credentials", connections.Connection{ConnType: "wasb", Login: "acct"}, "has no credentials"},
		{"Azure AD", connections.Connection{ConnType: "wasb", Login: "app", Password: "secret", Extra: `{"tenant_id": "t"}`}, "tenant_id (Azure AD sign-in) is not supported"},
		{"broken connection string", connections.Connection{ConnType: "wasb", Extra: `{"connection_string": "garbage"}`}, "not an Azure storage connection string"},
	}
	for _, tt := range bad {
		tt.c.ConnID = "az"
		_, err := FromConnection(tt.c)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: want %q, got %v", tt.name, tt.want, err)
		}
	}
}
