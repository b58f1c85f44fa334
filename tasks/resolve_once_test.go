package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/registry"
)

// calls counts what one task asks of a backend registration: how often its
// options are parsed (Configure), and how often a spec is put to its rules,
// by its Config (the bundle config loader's check) and by its driver (the
// portable layer's refusal at Create).
type calls struct {
	configure, configRules, driverRules atomic.Int32
}

// countingBackends registers one backend, "counted", whose sandboxes are
// the dirDriver's and whose rule refuses the image "refused:1".
func countingBackends(d *dirDriver, n *calls) *registry.Registry {
	r := registry.New()
	r.Register(registry.Registration{Name: "counted", Configure: func(raw json.RawMessage) (registry.Config, error) {
		n.configure.Add(1)
		var o fakeOptions
		if err := registry.DecodeOptions(raw, &o); err != nil {
			return nil, err
		}
		return countedConfig{d: d, n: n}, nil
	}})
	return r
}

var countedCaps = sandbox.Capabilities{Memory: true, BlockNetwork: true, Tags: true, List: true}

// countedRule is the counted backend's one static rule.
func countedRule(spec driver.Spec) []driver.Problem {
	if spec.Image == "refused:1" {
		return []driver.Problem{{Field: "image", Msg: "the counted backend takes no such image"}}
	}
	return nil
}

type countedConfig struct {
	d *dirDriver
	n *calls
}

func (c countedConfig) Capabilities() sandbox.Capabilities { return countedCaps }

func (c countedConfig) SpecProblems(spec driver.Spec) []driver.Problem {
	c.n.configRules.Add(1)
	return countedRule(spec)
}

func (c countedConfig) Open(context.Context, *connections.Connection, hclog.Logger) (driver.Driver, error) {
	return countedDriver{configuredDriver{c.d, "counted", countedCaps}, c.n}, nil
}

type countedDriver struct {
	configuredDriver
	n *calls
}

func (c countedDriver) SpecProblems(spec driver.Spec) []driver.Problem {
	c.n.driverRules.Add(1)
	return countedRule(spec)
}

// Issue 30: one provision parsed the chosen backend's options three times
// (the check, the open, and again in the check's options pass) and put the
// spec to the backend's rules in tasks and again in the driver. Now the
// backend is resolved once per task and the spec refused in one place at
// run time, the portable layer's Create, with the driver's rules; the
// Config's rules serve the bundle config loader alone.
func TestProvisionResolvesTheBackendOnceAndRefusesInOnePlace(t *testing.T) {
	e := newEnv(t)
	var n calls
	e.deps.Backends = countingBackends(e.drv, &n)
	opts := BackendOptions{Backend: "counted", Options: map[string]json.RawMessage{"counted": json.RawMessage(`{"flag": "x"}`)}}
	if _, err := Provision(context.Background(), e.deps, ProvisionInput{BackendOptions: opts}); err != nil {
		t.Fatal(err)
	}
	if got := [3]int32{n.configure.Load(), n.configRules.Load(), n.driverRules.Load()}; got != [3]int32{1, 0, 1} {
		t.Fatalf("one provision: Configure %d times, the Config's rules %d, the driver's %d; want 1, 0, 1", got[0], got[1], got[2])
	}
	if len(e.drv.creates) != 1 {
		t.Fatalf("want the sandbox created, got %d creates", len(e.drv.creates))
	}

	// A spec the rules refuse: refused once, by Create, before the driver
	// is asked to create anything.
	n = calls{}
	_, err := Provision(context.Background(), e.deps, ProvisionInput{BackendOptions: opts, Image: "refused:1"})
	if !errors.Is(err, sandbox.ErrRefused) || !strings.Contains(err.Error(), "the counted backend refuses this sandbox: image: the counted backend takes no such image") {
		t.Fatalf("want the rule's refusal naming the backend and the field, got %v", err)
	}
	if got := [3]int32{n.configure.Load(), n.configRules.Load(), n.driverRules.Load()}; got != [3]int32{1, 0, 1} {
		t.Fatalf("a refused provision: Configure %d times, the Config's rules %d, the driver's %d; want 1, 0, 1", got[0], got[1], got[2])
	}
	if len(e.drv.creates) != 1 {
		t.Fatalf("a refused spec reached the driver's Create (%d creates)", len(e.drv.creates))
	}

	// The bundle config loader's check parses the options once and asks
	// the Config's rules, in the same words.
	n = calls{}
	err = ProvisionInput{BackendOptions: opts, Image: "refused:1"}.Check(e.deps.Backends)
	if !errors.Is(err, sandbox.ErrRefused) || !strings.Contains(err.Error(), "the counted backend refuses this sandbox: image: the counted backend takes no such image") {
		t.Fatalf("load-time check: %v", err)
	}
	if got := [3]int32{n.configure.Load(), n.configRules.Load(), n.driverRules.Load()}; got != [3]int32{1, 1, 0} {
		t.Fatalf("load-time check: Configure %d times, the Config's rules %d, the driver's %d; want 1, 1, 0", got[0], got[1], got[2])
	}
}
