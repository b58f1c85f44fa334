package azure

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
)

// Config is what an Airflow "wasb" connection says about reaching Azure
// Blob storage: an account and one way to sign in to it.
type Config struct {
	// AccountName is the storage account (login, or the first label of the
	// account URL's host).
	AccountName string
	// AccountURL is the blob service URL: host, or
	// https://<account>.blob.core.windows.net/ (Azurite:
	// http://127.0.0.1:10000/devstoreaccount1).
	AccountURL string
	// AccountKey is the account's shared key: password, or extra
	// shared_access_key / account_key.
	AccountKey string
	// SASToken is extra sas_token without its leading "?" (or a whole
	// account URL with the token, when it starts with https).
	SASToken string
	// ConnectionString is extra connection_string; it overrides everything
	// else, as in the Azure provider.
	ConnectionString string
}

// Secrets are the account key, SAS token and connection string.
func (a Config) Secrets() map[string]string {
	return map[string]string{"account key": a.AccountKey, "sas token": a.SASToken, "connection string": a.ConnectionString}
}

// String never includes a key, token or connection string.
func (a Config) String() string {
	creds := "none"
	switch {
	case a.ConnectionString != "":
		creds = "connection_string(***)"
	case a.AccountKey != "":
		creds = "shared_key(***)"
	case a.SASToken != "":
		creds = "sas_token(***)"
	}
	return fmt.Sprintf("Config(account=%s url=%s credentials=%s)", a.AccountName, redactQuery(a.AccountURL), creds)
}

// azureUnsupportedExtras select Azure AD identities the Go worker does not
// implement; ignoring them would sign in differently from Airflow.
var azureUnsupportedExtras = []string{"tenant_id", "managed_identity_client_id", "workload_identity_tenant_id", "client_secret_auth_config"}

// FromConnection reads a wasb connection (the storage package has checked
// its type) the way the Azure provider's
// WasbHook does: extra connection_string wins; otherwise the account URL
// comes from host (or https://<login>.blob.core.windows.net/), the key from
// extra shared_access_key, password or extra account_key, and extra
// sas_token signs requests when there is no key. Extras may carry the old
// extra__wasb__ prefix. Errors name the connection and field, never a
// secret.
func FromConnection(c connections.Connection) (Config, error) {
	var cfg Config
	extra, err := c.ExtraMap()
	if err != nil {
		return cfg, err
	}
	str := func(name string) (string, error) {
		v := extra[name]
		if v == nil || v == "" {
			v = extra["extra__wasb__"+name]
		}
		return c.ExtraString(name, v)
	}
	for _, k := range azureUnsupportedExtras {
		if v, _ := str(k); v != "" {
			return cfg, fmt.Errorf("connection %q: extra %s (Azure AD sign-in) is not supported by the Go worker; give the connection the account key (password), a sas_token or a connection_string", c.ConnID, k)
		}
	}
	if cfg.ConnectionString, err = str("connection_string"); err != nil {
		return Config{}, err
	}
	if cfg.ConnectionString != "" {
		if !strings.Contains(cfg.ConnectionString, "=") {
			return Config{}, fmt.Errorf("connection %q: extra connection_string is not an Azure storage connection string (AccountName=...;AccountKey=...;BlobEndpoint=...); copy it from the storage account's Access keys page", c.ConnID)
		}
		return cfg, nil
	}
	cfg.AccountName = strings.TrimSpace(c.Login)
	if cfg.AccountName == "" {
		if cfg.AccountName, err = str("account_name"); err != nil {
			return Config{}, err
		}
	}
	if cfg.AccountURL, err = azureAccountURL(c.ConnID, strings.TrimSpace(c.Host), cfg.AccountName); err != nil {
		return Config{}, err
	}
	if cfg.AccountName == "" && cfg.AccountURL != "" {
		cfg.AccountName = accountFromURL(cfg.AccountURL)
	}
	key, err := str("shared_access_key")
	if err != nil {
		return Config{}, err
	}
	if key == "" {
		key = c.Password
	}
	if key == "" {
		if key, err = str("account_key"); err != nil {
			return Config{}, err
		}
	}
	cfg.AccountKey = key
	if cfg.SASToken, err = str("sas_token"); err != nil {
		return Config{}, err
	}
	cfg.SASToken = strings.TrimPrefix(cfg.SASToken, "?")
	if strings.HasPrefix(cfg.SASToken, "https://") || strings.HasPrefix(cfg.SASToken, "http://") {
		// A whole account URL with its token, as WasbHook accepts.
		u, err := url.Parse(cfg.SASToken)
		if err != nil || u.RawQuery == "" {
			return Config{}, fmt.Errorf("connection %q: extra sas_token looks like a URL but has no token after ?; give the token (sv=...&sig=...) or the account URL with it", c.ConnID)
		}
		cfg.SASToken = u.RawQuery
		u.RawQuery = ""
		cfg.AccountURL = u.String()
		if cfg.AccountName == "" {
			cfg.AccountName = accountFromURL(cfg.AccountURL)
		}
	}
	if cfg.AccountURL == "" {
		return Config{}, fmt.Errorf("connection %q names no storage account; set login to the account name (or host to the account URL https://<account>.blob.core.windows.net), or extra connection_string", c.ConnID)
	}
	if cfg.AccountKey == "" && cfg.SASToken == "" {
		return Config{}, fmt.Errorf("connection %q has no credentials; set password to the account key, or extra sas_token or connection_string (Azure AD sign-in is not supported by the Go worker)", c.ConnID)
	}
	return cfg, nil
}

// azureAccountURL follows the Azure provider's parse_blob_account_url: host
// when it is a URL (or a host name), else the account's public endpoint.
func azureAccountURL(connID, host, account string) (string, error) {
	if host == "" {
		if account == "" {
			return "", nil
		}
		return "https://" + account + ".blob.core.windows.net/", nil
	}
	if !strings.Contains(host, "://") {
		if !strings.Contains(host, ".") {
			if account == "" {
				return "", fmt.Errorf("connection %q: host %q is neither an account URL nor a host name; set host to https://<account>.blob.core.windows.net", connID, host)
			}
			return "https://" + account + ".blob.core.windows.net/", nil
		}
		host = "https://" + host
	}
	if err := connections.CheckEndpoint(connID, "host", host, "the password"); err != nil {
		return "", fmt.Errorf("%s", strings.Replace(err.Error(), "extra host", "host", 1))
	}
	return host, nil
}

// accountFromURL is the account an account URL names: the first label of a
// public host name, or the first path segment of an IP or localhost URL
// (Azurite's http://127.0.0.1:10000/devstoreaccount1).
func accountFromURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	h := u.Hostname()
	if net.ParseIP(h) != nil || h == "localhost" {
		seg, _, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
		return seg
	}
	label, _, _ := strings.Cut(h, ".")
	return label
}

// redactQuery drops a URL's query (a SAS token's signature) for display.
func redactQuery(raw string) string {
	if i := strings.IndexByte(raw, '?'); i >= 0 {
		return raw[:i] + "?xxxxx"
	}
	return raw
}
