package registry

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

type testOptions struct {
	Size  int      `json:"size"`
	Wait  Duration `json:"wait"`
	Names []string `json:"names"`
}

type testConfig struct{ gpu bool }

// A backend with GPUs here has an open network too, the other a blocked one.
func (c testConfig) Capabilities() driver.Capabilities {
	return driver.Capabilities{GPU: c.gpu, OpenNetwork: c.gpu, BlockNetwork: !c.gpu}
}
func (testConfig) Open(context.Context, *connections.Connection, hclog.Logger) (driver.Driver, error) {
	return nil, nil
}

func backend(name string, gpu bool) Registration {
	return Registration{Name: name, Configure: func(raw json.RawMessage) (Config, error) {
		var o testOptions
		if err := DecodeOptions(raw, &o); err != nil {
			return nil, err
		}
		return testConfig{gpu: gpu}, nil
	}}
}

func TestRegistryLooksUpAndListsBackends(t *testing.T) {
	r := New()
	r.Register(backend("b", false))
	r.Register(backend("a", true))
	if got := strings.Join(r.Names(), ","); got != "a,b" {
		t.Fatalf("names %s", got)
	}
	if b, ok := r.Lookup(" A "); !ok || b.Name != "a" {
		t.Fatalf("lookup is case-insensitive and trims: %v %v", b.Name, ok)
	}
	if got := strings.Join(r.Able(driver.CapGPU), ","); got != "a" {
		t.Fatalf("backends able to provide gpu: %s", got)
	}
	// Network capabilities too: before the capability table, Able knew no
	// network.block, so a network refusal never said which backend could.
	if open, blocked := strings.Join(r.Able(driver.CapOpenNetwork), ","), strings.Join(r.Able(driver.CapBlockNetwork), ","); open != "a" || blocked != "b" {
		t.Fatalf("backends able to provide an open network: %q, a blocked one: %q", open, blocked)
	}
	_, _, err := r.Configure("c", nil)
	if err == nil || !strings.Contains(err.Error(), `backend "c" is not one this bundle links (a, b)`) {
		t.Fatalf("unknown backend: %v", err)
	}
	if err := New().Unknown("x"); !strings.Contains(err.Error(), "links no sandbox backend") {
		t.Fatalf("unknown in an empty registry: %v", err)
	}
}

func TestUnknownGivesTheBinarysBuildHint(t *testing.T) {
	r := New()
	r.Register(backend("a", false))
	r.SetUnlinkedHint(func(name string) string {
		if name == "k8s" {
			return "build with -tags backend_k8s"
		}
		return ""
	})
	if err := r.Unknown(" K8s"); !strings.Contains(err.Error(), `backend " K8s" is not linked into this binary (it links a); build with -tags backend_k8s`) {
		t.Fatalf("known but unlinked backend: %v", err)
	}
	// A name the hint does not know (a typo) keeps the generic advice.
	if err := r.Unknown("k9s"); !strings.Contains(err.Error(), `backend "k9s" is not one this bundle links (a)`) {
		t.Fatalf("unknown backend: %v", err)
	}
}

func TestRegisterRefusesDuplicatesAndBadNames(t *testing.T) {
	for name, reg := range map[string]func(r *Registry){
		"duplicate":  func(r *Registry) { r.Register(backend("a", false)); r.Register(backend("a", false)) },
		"upper case": func(r *Registry) { r.Register(backend("Modal", false)) },
		"no name":    func(r *Registry) { r.Register(backend("", false)) },
		"no configure": func(r *Registry) {
			r.Register(Registration{Name: "x"})
		},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("want a panic")
				}
			}()
			reg(New())
		})
	}
}

func TestOptionsDecodeStrictlyAndNameTheKey(t *testing.T) {
	r := New()
	r.Register(backend("a", false))
	for raw, want := range map[string]string{
		`{"sise": 1}`:      `backend_options.a: unknown option "sise"`,
		`{"size": "big"}`:  "backend_options.a: size: want int, got a JSON string",
		`{"wait": "soon"}`: `"soon" is not a duration`,
		`{"names": "x"}`:   "names: want []string",
		`{"wait": -1}`:     "neither a duration",
	} {
		if _, _, err := r.Configure("a", json.RawMessage(raw)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: want an error mentioning %q, got %v", raw, want, err)
		}
	}
	for _, raw := range []string{"", "null", `{}`, `{"size": 3, "wait": "2m", "names": ["x"]}`, `{"wait": 90}`} {
		if _, _, err := r.Configure("a", json.RawMessage(raw)); err != nil {
			t.Errorf("%q: %v", raw, err)
		}
	}
}
