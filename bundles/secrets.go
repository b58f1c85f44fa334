package bundles

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
)

// What a task learns that Airflow's masker hides is registered with the
// task's secrets (the log sink's set), and masked wherever the task's
// values go: its log records, the XComs it pushes, its rendered fields and
// rendered map index, its failure's reason.
//
// Airflow's rules (task SDK 1.3.2): a connection's password and its extra
// always; a variable's value only when its key is a secret's name
// (redact.Names: "par_secret", "api_token"), wherever the value came from
// (Airflow's own variable lookup masks an AIRFLOW_VAR_ one the same way).

// maskConnection registers a connection's password and extra, as Airflow's
// supervisor does when it serves one.
func (c *client) maskConnection(conn connections.Connection) {
	c.secrets.Add(conn.Password)
	if conn.Extra != "" {
		c.secrets.AddExtra(conn.Extra, c.names)
	}
}

// maskVariable registers a variable's value when its key is a secret's name.
func (c *client) maskVariable(key, value string) {
	if c.names.Sensitive(key) {
		c.secrets.Add(value)
	}
}

// maskEnvVariables registers the AIRFLOW_VAR_<KEY> values in environ whose
// keys are secrets' names before the task runs: the task may read one
// (GetVariable), and its inputs may hold one, before its rendered fields
// are reported.
func (c *client) maskEnvVariables(environ []string) {
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if key, isVar := strings.CutPrefix(k, "AIRFLOW_VAR_"); ok && isVar {
			c.maskVariable(key, v)
		}
	}
}

// maskText hides in s what no rendered text may show: the credentials and
// query values of the URLs in it (a presigned URL's signature), then every
// registered secret.
func (c *client) maskText(s string) string { return c.secrets.String(redactURLs(s)) }

// connectionUser is an input that names the Airflow connections its task
// will read (tasks.ProvisionInput and the other catalogue inputs do; a Go
// task's input type may too). The runtime reads them, and so learns their
// secrets, before it reports the rendered fields and map index.
type connectionUser interface {
	ConnectionIDs() []string
}

// resolveDeclared reads the connections input declares, registering their
// password and extra. One that does not exist has no secrets to hide (the
// task says so itself when it needs it); any other failure to read one is
// an error, since what it would have masked is unknown.
func (c *client) resolveDeclared(ctx context.Context, input reflect.Value) error {
	u, ok := input.Interface().(connectionUser)
	if !ok {
		return nil
	}
	seen := map[string]bool{}
	for _, id := range u.ConnectionIDs() {
		if id == "" || seen[id] {
			continue
		}
		seen[id] = true
		if _, err := c.GetConnection(ctx, id); err != nil && !errors.Is(err, ErrConnectionNotFound) {
			return fmt.Errorf("reading connection %q: %w", id, err)
		}
	}
	return nil
}
