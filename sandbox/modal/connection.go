package modal

import (
	"fmt"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
)

// DefaultConnID is the Modal provider's default connection id.
const DefaultConnID = "modal_default"

// Credentials is what an Airflow "modal" connection says about reaching
// Modal. Empty TokenID and TokenSecret mean "let the Modal SDK resolve
// credentials itself": MODAL_TOKEN_ID/MODAL_TOKEN_SECRET, then ~/.modal.toml.
// An empty Environment likewise leaves it to the SDK (MODAL_ENVIRONMENT or
// the active profile).
type Credentials struct {
	TokenID     string
	TokenSecret string
	Environment string
	Source      string // the connection they were read from, for messages; "" = none
}

// HasTokens reports whether the config carries its own token pair, as
// opposed to relying on the SDK's environment/profile resolution.
func (m Credentials) HasTokens() bool { return m.TokenID != "" }

// String never includes the token secret, so a Credentials can be logged or
// put in an error safely.
func (m Credentials) String() string {
	creds := "sdk-default"
	if m.HasTokens() {
		creds = "token(" + m.TokenID + ", secret=***)"
	}
	conn := m.Source
	if conn == "" {
		conn = "(none)"
	}
	return fmt.Sprintf("Credentials(connection=%s credentials=%s environment=%s)", conn, creds, m.Environment)
}

// CredentialsFromConnection reads an Airflow modal connection the way the Modal
// provider's ModalHook does: login is the token id, password the token
// secret, extra "environment" the Modal environment. Tokens come in pairs:
// both or neither; exactly one is an error naming the connection (never the
// secret). A nil connection means "no connection": the SDK's own resolution.
func CredentialsFromConnection(c *connections.Connection) (Credentials, error) {
	if c == nil {
		return Credentials{}, nil
	}
	cfg := Credentials{Source: c.ConnID}
	switch strings.ToLower(c.ConnType) {
	case "", "modal":
	default:
		return cfg, fmt.Errorf("connection %q has type %q, not modal; point the task's modal connection at a connection of type modal", c.ConnID, c.ConnType)
	}
	id := strings.TrimSpace(c.Login)
	secret := strings.TrimSpace(c.Password)
	switch {
	case id != "" && secret == "":
		return cfg, fmt.Errorf("connection %q has a Modal token id (login) but no token secret (password); set both, or clear both to use MODAL_TOKEN_ID/MODAL_TOKEN_SECRET or ~/.modal.toml", c.ConnID)
	case id == "" && secret != "":
		return cfg, fmt.Errorf("connection %q has a Modal token secret (password) but no token id (login); set both, or clear both to use MODAL_TOKEN_ID/MODAL_TOKEN_SECRET or ~/.modal.toml", c.ConnID)
	}
	cfg.TokenID, cfg.TokenSecret = id, secret
	extra, err := c.ExtraMap()
	if err != nil {
		return cfg, err
	}
	if v, ok := extra["environment"]; ok && v != nil {
		s, ok := v.(string)
		if !ok {
			return cfg, fmt.Errorf("connection %q: extra environment must be a string naming a Modal environment (e.g. \"main\"), got %T", c.ConnID, v)
		}
		cfg.Environment = strings.TrimSpace(s)
	}
	return cfg, nil
}
