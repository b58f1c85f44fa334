package startup_test

import (
	"os/exec"
	"strings"
	"testing"
)

// deps lists the packages pkg links (go list -deps), as Go would build it.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

const module = "github.com/airflow-sandbox/airflow-go-worker/"

// What each layer may link is the architecture's promise: a bundle of
// plain Go tasks pays for no sandbox, storage or cloud SDK code at start,
// and the catalogue reaches backends only through the registry, so a
// bundle links only the backends its main imports.
func TestLayersLinkOnlyWhatTheyMay(t *testing.T) {
	cases := []struct {
		pkg       string
		forbidden []string
	}{
		{"./internal/plainbundle", []string{module + "sandbox", module + "storage", module + "tasks", "github.com/aws/", "google.golang.org/grpc", "github.com/modal-labs/", "gocloud.dev", "cloud.google.com/", "github.com/Azure/"}},
		{module + "tasks", []string{module + "sandbox/local", module + "sandbox/modal", module + "sandbox/opensandbox", "github.com/modal-labs/"}},
		{module + "sandbox", []string{module + "connections", module + "bundles", module + "sandbox/registry"}},
		{module + "sandbox/driver", []string{module + "connections", module + "bundles", "github.com/hashicorp/go-hclog"}},
		{module + "sandbox/local", []string{module + "sandbox/modal", module + "sandbox/opensandbox", module + "tasks"}},
		{module + "sandbox/modal", []string{module + "sandbox/local", module + "sandbox/opensandbox", module + "tasks"}},
		{module + "sandbox/opensandbox", []string{module + "sandbox/local", module + "sandbox/modal", module + "tasks"}},
	}
	for _, c := range cases {
		for _, d := range deps(t, c.pkg) {
			for _, f := range c.forbidden {
				if d == f || strings.HasPrefix(d, f+"/") || strings.HasSuffix(f, "/") && strings.HasPrefix(d, f) {
					t.Errorf("%s links %s, which it must not (forbidden: %s)", c.pkg, d, f)
				}
			}
		}
	}
}
