package s3

import (
	"fmt"
	"sort"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
)

// AWSConfig is what an Airflow "aws" connection says about reaching S3.
// Empty AccessKeyID/SecretAccessKey mean "use the default AWS credential
// chain" (environment, shared config, instance role). Empty Region and
// EndpointURL mean the SDK defaults.
type AWSConfig struct {
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	Region          string
	EndpointURL     string
}

// HasStaticCredentials reports whether the config carries its own keys,
// as opposed to relying on the default credential chain.
func (a AWSConfig) HasStaticCredentials() bool { return a.AccessKeyID != "" }

// String never includes the secret or the session token, so an AWSConfig can
// be logged or put in an error safely.
func (a AWSConfig) String() string {
	creds := "default-chain"
	if a.HasStaticCredentials() {
		creds = "static(" + a.AccessKeyID + ", secret=***"
		if a.SessionToken != "" {
			creds += ", token=***"
		}
		creds += ")"
	}
	return fmt.Sprintf("AWSConfig(credentials=%s region=%s endpoint=%s)", creds, a.Region, a.EndpointURL)
}

// Secrets are the secret key and session token.
func (a AWSConfig) Secrets() map[string]string {
	return map[string]string{"secret access key": a.SecretAccessKey, "session token": a.SessionToken}
}

// awsUnsupportedExtras change which identity Airflow would use. Ignoring them
// would silently run with different credentials, so they are refused.
var awsUnsupportedExtras = []string{"role_arn", "assume_role_method", "profile_name", "external_id"}

// AWSFromConnection reads an Airflow aws connection (FromConnection has
// checked its type) the way Airflow's
// AwsConnectionWrapper does: login/password are the access key id and secret;
// extras aws_access_key_id/aws_secret_access_key are accepted when login and
// password are empty; extras region_name, endpoint_url (or
// service_config.s3.endpoint_url) and aws_session_token complete it.
// Keys come in pairs: both or neither. Errors name the connection and the
// field, never a secret value.
func AWSFromConnection(c connections.Connection) (AWSConfig, error) {
	var cfg AWSConfig
	if c.Host != "" {
		return cfg, fmt.Errorf("connection %q: the host field is not used by aws connections; move the endpoint to extra endpoint_url (e.g. {\"endpoint_url\": \"http://%s\"})", c.ConnID, c.Host)
	}
	extra, err := c.ExtraMap()
	if err != nil {
		return AWSConfig{}, err
	}
	str := func(key string) (string, error) { return c.ExtraString(key, extra[key]) }

	var bad []string
	for _, k := range awsUnsupportedExtras {
		if _, ok := extra[k]; ok {
			bad = append(bad, k)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return cfg, fmt.Errorf("connection %q: extra %s is not supported by the Go worker; give the connection an access key (login/password) or leave it empty to use the worker's default AWS credentials", c.ConnID, strings.Join(bad, ", "))
	}

	extraKey, err := str("aws_access_key_id")
	if err != nil {
		return AWSConfig{}, err
	}
	extraSecret, err := str("aws_secret_access_key")
	if err != nil {
		return AWSConfig{}, err
	}
	if cfg.SessionToken, err = str("aws_session_token"); err != nil {
		return AWSConfig{}, err
	}
	if cfg.Region, err = str("region_name"); err != nil {
		return AWSConfig{}, err
	}
	if cfg.EndpointURL, err = str("endpoint_url"); err != nil {
		return AWSConfig{}, err
	}
	if cfg.EndpointURL == "" {
		if cfg.EndpointURL, err = s3ServiceEndpoint(c.ConnID, extra); err != nil {
			return AWSConfig{}, err
		}
	}

	login, password := strings.TrimSpace(c.Login), c.Password
	switch {
	case login != "" || password != "":
		if extraKey != "" || extraSecret != "" {
			if extraKey != login || extraSecret != password {
				return AWSConfig{}, fmt.Errorf("connection %q sets credentials both in login/password and in extra aws_access_key_id/aws_secret_access_key, with different values; keep only one of the two", c.ConnID)
			}
		}
		cfg.AccessKeyID, cfg.SecretAccessKey = login, password
		if err := checkPair(c.ConnID, cfg, "login", "password"); err != nil {
			return AWSConfig{}, err
		}
	default:
		cfg.AccessKeyID, cfg.SecretAccessKey = extraKey, extraSecret
		if err := checkPair(c.ConnID, cfg, "extra aws_access_key_id", "extra aws_secret_access_key"); err != nil {
			return AWSConfig{}, err
		}
	}
	if cfg.SessionToken != "" && cfg.AccessKeyID == "" {
		return AWSConfig{}, fmt.Errorf("connection %q: extra aws_session_token is set without an access key; set login/password to the temporary key pair the token belongs to", c.ConnID)
	}
	if err := connections.CheckEndpoint(c.ConnID, "endpoint_url", cfg.EndpointURL, "login/password"); err != nil {
		return AWSConfig{}, err
	}
	return cfg, nil
}

// checkPair enforces "both keys or neither", naming the fields the way the
// user wrote them.
func checkPair(connID string, cfg AWSConfig, keyField, secretField string) error {
	switch {
	case cfg.AccessKeyID != "" && cfg.SecretAccessKey == "":
		return fmt.Errorf("connection %q: %s (access key id) is set but %s (secret) is empty; set both, or neither to use the default AWS credentials", connID, keyField, secretField)
	case cfg.AccessKeyID == "" && cfg.SecretAccessKey != "":
		return fmt.Errorf("connection %q: %s (secret) is set but %s (access key id) is empty; set both, or neither to use the default AWS credentials", connID, secretField, keyField)
	}
	return nil
}

// s3ServiceEndpoint reads Airflow's per-service form
// {"service_config": {"s3": {"endpoint_url": "..."}}}.
func s3ServiceEndpoint(connID string, extra map[string]any) (string, error) {
	sc, ok := extra["service_config"]
	if !ok || sc == nil {
		return "", nil
	}
	scm, ok := sc.(map[string]any)
	if !ok {
		return "", fmt.Errorf("connection %q: extra service_config must be an object like {\"s3\": {\"endpoint_url\": ...}}, got %T", connID, sc)
	}
	s3, ok := scm["s3"]
	if !ok || s3 == nil {
		return "", nil
	}
	s3m, ok := s3.(map[string]any)
	if !ok {
		return "", fmt.Errorf("connection %q: extra service_config.s3 must be an object, got %T", connID, s3)
	}
	ep, ok := s3m["endpoint_url"]
	if !ok || ep == nil {
		return "", nil
	}
	s, ok := ep.(string)
	if !ok {
		return "", fmt.Errorf("connection %q: extra service_config.s3.endpoint_url must be a string, got %T", connID, ep)
	}
	return strings.TrimSpace(s), nil
}
