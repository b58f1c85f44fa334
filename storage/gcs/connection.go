package gcs

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
)

// Config is what an Airflow "google_cloud_platform" connection says about
// reaching Cloud Storage. With no key, Google's application default
// credentials are used (GOOGLE_APPLICATION_CREDENTIALS, gcloud's
// credentials, the metadata server).
type Config struct {
	// KeyfileJSON is a service-account (or other) credentials JSON: extra
	// keyfile_dict, or the contents of credential_config_file.
	KeyfileJSON []byte
	// KeyPath is a credentials JSON file on the worker: extra key_path, or
	// credential_config_file when it names a file.
	KeyPath string
	// Project is extra project (used only for error messages and quota).
	Project string
	// Scopes are extra scope, comma separated; empty means full control of
	// Cloud Storage.
	Scopes []string
	// Anonymous is extra is_anonymous: no credentials at all (public
	// buckets, emulators).
	Anonymous bool
	// Endpoint is extra gcs.endpoint (what Airflow's gcs filesystem passes
	// as endpoint_url), e.g. an emulator's http://127.0.0.1:4443.
	Endpoint string
}

// Secrets are the key JSON and, on its own, its private key, which an
// error could quote without the rest of the file.
func (g Config) Secrets() map[string]string {
	var k struct {
		PrivateKey string `json:"private_key"`
	}
	_ = json.Unmarshal(g.KeyfileJSON, &k)
	return map[string]string{"keyfile_dict": string(g.KeyfileJSON), "private key": k.PrivateKey}
}

// HasKey reports whether the config carries its own credentials.
func (g Config) HasKey() bool { return len(g.KeyfileJSON) > 0 || g.KeyPath != "" }

// String never includes key material, so a Config can be logged.
func (g Config) String() string {
	creds := "application-default"
	switch {
	case g.Anonymous:
		creds = "anonymous"
	case len(g.KeyfileJSON) > 0:
		creds = "keyfile_dict(***)"
	case g.KeyPath != "":
		creds = "key_path(" + g.KeyPath + ")"
	}
	return fmt.Sprintf("Config(credentials=%s project=%s endpoint=%s)", creds, g.Project, g.Endpoint)
}

// gcpUnsupportedExtras change which identity the Google provider would use
// in ways the Go worker cannot follow; ignoring them would run with other
// credentials than Airflow's, so they are refused.
var gcpUnsupportedExtras = []string{"impersonation_chain", "key_secret_name", "key_secret_project_id", "idp_issuer_url", "client_id", "client_secret"}

// gcpField reads an extra as the Google provider does: the plain name, or
// the old prefixed form extra__google_cloud_platform__<name>.
func gcpField(extra map[string]any, name string) (any, bool) {
	if v, ok := extra[name]; ok && v != nil && v != "" {
		return v, true
	}
	v, ok := extra["extra__google_cloud_platform__"+name]
	return v, ok && v != nil && v != ""
}

// FromConnection reads a google_cloud_platform connection (the storage
// package has checked its type) the way the
// Google provider's GoogleBaseHook does: extra keyfile_dict (a JSON string
// or object) or key_path, credential_config_file, project, scope,
// is_anonymous, plus gcs.endpoint from Airflow's gcs filesystem. keyfile_dict
// and key_path together are an error, as in the provider. Errors name the
// connection and field, never key material.
func FromConnection(c connections.Connection) (Config, error) {
	extra, err := c.ExtraMap()
	if err != nil {
		return Config{}, err
	}
	if err := refuseUnsupported(c.ConnID, extra); err != nil {
		return Config{}, err
	}
	// str reads a string extra, in either of its spellings.
	str := func(name string) (string, error) {
		v, _ := gcpField(extra, name)
		return c.ExtraString(name, v)
	}
	var cfg Config
	if err := readKey(c.ConnID, extra, str, &cfg); err != nil {
		return Config{}, err
	}
	if err := readSettings(c.ConnID, extra, str, &cfg); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// refuseUnsupported names the extras that would choose another identity
// than the Go worker can use.
func refuseUnsupported(connID string, extra map[string]any) error {
	var bad []string
	for _, k := range gcpUnsupportedExtras {
		if _, ok := gcpField(extra, k); ok {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return fmt.Errorf("connection %q: extra %s is not supported by the Go worker; give the connection a service-account key (keyfile_dict or key_path), or leave it without one to use the worker's application default credentials", connID, strings.Join(bad, ", "))
}

// readKey reads the key into cfg: keyfile_dict (a JSON string or object),
// key_path, or credential_config_file (JSON or a path), at most one of
// them; key JSON must name its type.
func readKey(connID string, extra map[string]any, str func(string) (string, error), cfg *Config) error {
	if v, ok := gcpField(extra, "keyfile_dict"); ok {
		switch kv := v.(type) {
		case string:
			if !json.Valid([]byte(kv)) {
				return fmt.Errorf("connection %q: extra keyfile_dict is not valid JSON; paste the whole service-account key file", connID)
			}
			cfg.KeyfileJSON = []byte(kv)
		case map[string]any:
			cfg.KeyfileJSON, _ = json.Marshal(kv)
		default:
			return fmt.Errorf("connection %q: extra keyfile_dict must be the key file's JSON (a string or an object), got %T", connID, v)
		}
	}
	var err error
	if cfg.KeyPath, err = str("key_path"); err != nil {
		return err
	}
	if len(cfg.KeyfileJSON) > 0 && cfg.KeyPath != "" {
		return fmt.Errorf("connection %q sets both extra keyfile_dict and key_path; they are mutually exclusive, keep one", connID)
	}
	ccf, err := str("credential_config_file")
	if err != nil {
		return err
	}
	if ccf != "" {
		if cfg.HasKey() {
			return fmt.Errorf("connection %q sets credential_config_file and a key; keep one", connID)
		}
		if strings.HasPrefix(ccf, "{") {
			cfg.KeyfileJSON = []byte(ccf)
		} else {
			cfg.KeyPath = ccf
		}
	}
	if len(cfg.KeyfileJSON) > 0 {
		var probe struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(cfg.KeyfileJSON, &probe); err != nil || probe.Type == "" {
			return fmt.Errorf("connection %q: the key JSON has no \"type\" (such as service_account); paste the key file Google gave you", connID)
		}
	}
	return nil
}

// readSettings reads project, scope, is_anonymous and gcs.endpoint into
// cfg.
func readSettings(connID string, extra map[string]any, str func(string) (string, error), cfg *Config) error {
	var err error
	if cfg.Project, err = str("project"); err != nil {
		return err
	}
	scope, err := str("scope")
	if err != nil {
		return err
	}
	for _, s := range strings.Split(scope, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.Scopes = append(cfg.Scopes, s)
		}
	}
	if v, ok := gcpField(extra, "is_anonymous"); ok {
		switch b := v.(type) {
		case bool:
			cfg.Anonymous = b
		case string:
			cfg.Anonymous = strings.EqualFold(b, "true")
		default:
			return fmt.Errorf("connection %q: extra is_anonymous must be true or false, got %T", connID, v)
		}
	}
	if ep, ok := extra["gcs.endpoint"]; ok && ep != nil {
		s, ok := ep.(string)
		if !ok {
			return fmt.Errorf("connection %q: extra gcs.endpoint must be a URL string, got %T", connID, ep)
		}
		cfg.Endpoint = strings.TrimSpace(s)
		if err := connections.CheckEndpoint(connID, "gcs.endpoint", cfg.Endpoint, "extra keyfile_dict"); err != nil {
			return err
		}
	}
	return nil
}
