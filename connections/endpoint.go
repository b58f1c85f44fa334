package connections

import (
	"fmt"
	"net/url"
	"strings"
)

// CheckEndpoint refuses an endpoint field that is not an http(s) URL or
// that carries credentials before the host (they would be logged and shown
// in errors as the endpoint). An empty endpoint is fine. Store drivers
// call it on the endpoint fields of their connections.
func CheckEndpoint(connID, field, endpoint, keysGo string) error {
	if endpoint == "" {
		return nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		shown := fmt.Sprintf(" %q", endpoint)
		if strings.Contains(endpoint, "@") {
			shown = "" // may hold credentials
		}
		return fmt.Errorf("connection %q: extra %s%s is not an http(s) URL such as https://storage.example.com; fix the connection's Extra", connID, field, shown)
	}
	if u.User != nil {
		u.User = nil
		return fmt.Errorf("connection %q: extra %s carries credentials before the host; write it as %s and put the keys in %s", connID, field, u, keysGo)
	}
	return nil
}
