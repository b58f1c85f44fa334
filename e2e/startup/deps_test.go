package startup_test

import (
	"os/exec"
	"strings"
	"testing"
)

// deps lists the packages pkg links (go list -deps), as Go would build it
// with the build tags given.
func deps(t *testing.T, pkg string, tags ...string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-tags", strings.Join(tags, ","), pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps -tags %q %s: %v", tags, pkg, err)
	}
	return strings.Fields(string(out))
}

// links reports whether list holds pkg or a package under it ("x/" also
// matches "x/y" and "xz").
func links(list []string, pkg string) bool {
	for _, d := range list {
		if d == pkg || strings.HasPrefix(d, pkg+"/") || strings.HasSuffix(pkg, "/") && strings.HasPrefix(d, pkg) {
			return true
		}
	}
	return false
}

const module = "github.com/airflow-sandbox/airflow-go-worker/"

// opensandboxSDK is OpenSandbox's Go SDK, which sandbox/opensandbox is built on.
const opensandboxSDK = "github.com/alibaba/OpenSandbox/sdks/sandbox/go"

// What each layer may link is the architecture's promise: a bundle of
// plain Go tasks pays for no sandbox, storage or cloud SDK code at start,
// and the catalogue reaches backends only through the registry, so a
// bundle links only the backends its main imports.
func TestLayersLinkOnlyWhatTheyMay(t *testing.T) {
	cases := []struct {
		pkg       string
		forbidden []string
	}{
		{"./internal/plainbundle", []string{module + "sandbox", module + "storage", module + "tasks", "github.com/aws/", "google.golang.org/grpc", "github.com/modal-labs/", "gocloud.dev", "cloud.google.com/", "github.com/Azure/", opensandboxSDK,
			// Reading another executable's build info (pack, check) is
			// not a task's work: its readers' inits would run at every start.
			"debug/", "compress/", "internal/zstd"}},
		// A Go bundle links a store only by importing its package.
		{module + "tasks", []string{module + "sandbox/local", module + "sandbox/modal", module + "sandbox/opensandbox", "github.com/modal-labs/", opensandboxSDK,
			module + "storage/s3", module + "storage/gcs", module + "storage/azure", "github.com/aws/", "google.golang.org/api/", "github.com/Azure/"}},
		{module + "storage", []string{module + "storage/s3", "github.com/aws/"}},
		{module + "sandbox", []string{module + "connections", module + "bundles", module + "sandbox/registry"}},
		{module + "sandbox/driver", []string{module + "connections", module + "bundles", "github.com/hashicorp/go-hclog"}},
		{module + "sandbox/local", []string{module + "sandbox/modal", module + "sandbox/opensandbox", module + "tasks"}},
		{module + "sandbox/modal", []string{module + "sandbox/local", module + "sandbox/opensandbox", module + "tasks"}},
		{module + "sandbox/opensandbox", []string{module + "sandbox/local", module + "sandbox/modal", module + "tasks"}},
		// The SDK's sandbox pools (and their Redis store) are not the driver's.
		{module + "sandbox/opensandbox", []string{opensandboxSDK + "/poolredis", "github.com/redis/"}},
	}
	for _, c := range cases {
		for _, d := range deps(t, c.pkg) {
			for _, f := range c.forbidden {
				if links([]string{d}, f) {
					t.Errorf("%s links %s, which it must not (forbidden: %s)", c.pkg, d, f)
				}
			}
		}
	}
}

// The standard binary's default build (make build) links the local
// backend and file:// only; each extra's build tag adds its package and
// SDK, and nothing else's.
func TestStandardBuildLinksOnlyItsExtras(t *testing.T) {
	const cmd = module + "cmd/airflow-go-worker"
	type extra struct {
		tag  string
		pkgs []string // what the tag links
	}
	extras := []extra{
		{"backend_modal", []string{module + "sandbox/modal", "github.com/modal-labs/"}},
		{"backend_opensandbox", []string{module + "sandbox/opensandbox", opensandboxSDK}},
		{"store_s3", []string{module + "storage/s3", "github.com/aws/"}},
		{"store_gcs", []string{module + "storage/gcs", "google.golang.org/api/"}},
		{"store_azure", []string{module + "storage/azure", "github.com/Azure/"}},
	}
	always := []string{module + "sandbox/local", module + "storage"}
	// Linked by no extra but pulled in by the SDKs: the default build must
	// not have them either.
	heavy := []string{"google.golang.org/grpc", "google.golang.org/protobuf", "cloud.google.com/", "go.opentelemetry.io/", "github.com/redis/"}
	check := func(tags []string, want func(extra) bool) {
		t.Helper()
		list := deps(t, cmd, tags...)
		for _, p := range always {
			if !links(list, p) {
				t.Errorf("-tags %q: %s does not link %s", tags, cmd, p)
			}
		}
		for _, e := range extras {
			for _, p := range e.pkgs {
				if got := links(list, p); got != want(e) {
					t.Errorf("-tags %q: %s links %s: %v, want %v", tags, cmd, p, got, want(e))
				}
			}
		}
		if len(tags) == 0 {
			for _, p := range heavy {
				if links(list, p) {
					t.Errorf("the default build links %s", p)
				}
			}
		}
	}
	check(nil, func(extra) bool { return false })
	for _, only := range extras {
		check([]string{only.tag}, func(e extra) bool { return e.tag == only.tag })
	}
	check([]string{"all_extras"}, func(extra) bool { return true })

	// OpenSandbox adds its driver and the SDK's root package (with the
	// singleflight it uses) and nothing else beyond the standard library:
	// no SDK sub-package (poolredis), no Redis client. Nor does the full build.
	for _, tags := range [][]string{{"backend_opensandbox"}, {"all_extras"}} {
		for _, p := range deps(t, cmd, tags...) {
			if links([]string{p}, opensandboxSDK+"/") || links([]string{p}, "github.com/redis/") {
				t.Errorf("-tags %q links %s, which the OpenSandbox driver does not use", tags, p)
			}
		}
	}
	def0 := map[string]bool{}
	for _, p := range deps(t, cmd) {
		def0[p] = true
	}
	for _, p := range deps(t, cmd, "backend_opensandbox") {
		std := !strings.Contains(strings.Split(p, "/")[0], ".")
		if !def0[p] && !std && p != module+"sandbox/opensandbox" && p != opensandboxSDK && p != "golang.org/x/sync/singleflight" {
			t.Errorf("-tags backend_opensandbox links %s, which is neither sandbox/opensandbox nor the OpenSandbox SDK", p)
		}
	}

	// S3, once in the default build, adds its driver and the AWS SDK and
	// nothing else beyond the standard library.
	def := map[string]bool{}
	for _, p := range deps(t, cmd) {
		def[p] = true
	}
	for _, p := range deps(t, cmd, "store_s3") {
		std := !strings.Contains(strings.Split(p, "/")[0], ".")
		if !def[p] && !std && !links([]string{p}, module+"storage/s3") && !links([]string{p}, "github.com/aws/") {
			t.Errorf("-tags store_s3 links %s, which is neither storage/s3 nor the AWS SDK", p)
		}
	}
}
