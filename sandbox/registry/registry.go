// Package registry is where sandbox backends plug in. Each backend package
// registers one Registration from its init function, so a bundle links exactly
// the backends its main package imports (one import line each):
//
//	import _ "github.com/airflow-sandbox/airflow-go-worker/sandbox/modal"
//
// A Registration says which Airflow connection it reads and parses its options
// (the backends: section of a bundle config, or backend_options of a task)
// into a Config, which declares the backend's capabilities and opens its
// driver. The tasks and the bundle config loader know backends only
// through this package.
package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// Registration is what a backend package registers.
type Registration struct {
	// Name is what a bundle config's backend: says ("modal").
	Name string
	// DefaultConnID is the Airflow connection read when a task names none;
	// "" means the backend takes no connection (conn_id is then ignored).
	DefaultConnID string
	// ConnOptional: when DefaultConnID does not exist, Open gets a nil
	// connection and uses credentials from the worker's environment, as
	// the Python provider's hook does for Modal.
	ConnOptional bool
	// Configure parses the backend's options, a JSON object (nil when the
	// config gives none), strictly: an unknown or ill-typed key is an error
	// naming it. It must not do I/O: it runs when a bundle loads. The
	// Config may also be a SpecChecker, whose I/O-free rules then apply
	// when a bundle loads too.
	Configure func(options json.RawMessage) (Config, error)
}

// Config is a backend with its options applied.
type Config interface {
	// Capabilities says what a spec may ask of the backend so configured.
	Capabilities() driver.Capabilities
	// Open builds the driver. conn is the Airflow connection the task
	// resolved (nil when the backend takes none, or an optional one is
	// missing); its secrets are already registered with the masker.
	Open(ctx context.Context, conn *connections.Connection, log hclog.Logger) (driver.Driver, error)
}

// SpecChecker is what a Config may implement besides: the backend's own
// rules on a spec that need no I/O (driver.SpecChecker). The bundle config
// loader applies them to each task's defaults, so pack, inspect and check
// refuse such a config; the backend's driver offers the same rules (the one
// function serves both), which the portable layer applies before Create.
type SpecChecker = driver.SpecChecker

// SpecProblems is cfg's SpecChecker answer, or none when it offers none.
func SpecProblems(cfg Config, spec driver.Spec) []driver.Problem {
	if c, ok := cfg.(SpecChecker); ok {
		return c.SpecProblems(spec)
	}
	return nil
}

// Rules is cfg's SpecChecker, or nil when it offers none, for
// driver.CheckBackend.
func Rules(cfg Config) driver.SpecChecker {
	if c, ok := cfg.(SpecChecker); ok {
		return c
	}
	return nil
}

// Registry holds backends by name. The zero value is not usable; use New.
type Registry struct {
	mu       sync.RWMutex
	backends map[string]Registration
	// unlinked says how to get a binary that links a backend this one
	// does not (SetUnlinkedHint).
	unlinked func(name string) string
}

// New returns an empty registry (tests build their own).
func New() *Registry { return &Registry{backends: map[string]Registration{}} }

// Default is where backend packages register themselves.
var Default = New()

// Register adds b to Default; see Registry.Register.
func Register(b Registration) { Default.Register(b) }

// Register adds b. It panics on an empty or lower-case-incompatible name,
// a missing Configure, or a name registered twice: all programming errors
// that must fail at start-up, not at a task.
func (r *Registry) Register(b Registration) {
	if b.Name == "" || b.Name != strings.ToLower(b.Name) || b.Configure == nil {
		panic(fmt.Sprintf("registry: backend %q needs a lower-case name and a Configure function", b.Name))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.backends[b.Name]; dup {
		panic(fmt.Sprintf("registry: backend %q registered twice", b.Name))
	}
	r.backends[b.Name] = b
}

// Lookup finds a backend by name (case-insensitive, surrounding spaces
// ignored).
func (r *Registry) Lookup(name string) (Registration, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	b, ok := r.backends[strings.ToLower(strings.TrimSpace(name))]
	return b, ok
}

// Names lists the registered backends, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.backends))
	for n := range r.backends {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// SetUnlinkedHint sets what Unknown advises for a backend this binary does
// not link: hint returns the build command that adds it (the standard
// binary chooses its backends with build tags), or "" for a name it does
// not know, which keeps the generic advice.
func (r *Registry) SetUnlinkedHint(hint func(name string) string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unlinked = hint
}

// Unknown is the error for a backend name nothing registered: it lists the
// ones this binary links, and how to build one that links name. Like every
// error of Configure, it is final: a task failing on it is not retried.
func (r *Registry) Unknown(name string) error {
	names := r.Names()
	r.mu.RLock()
	hint := r.unlinked
	r.mu.RUnlock()
	if hint != nil {
		if how := hint(strings.ToLower(strings.TrimSpace(name))); how != "" {
			return final.Errorf("backend %q is not linked into this binary (it links %s); %s", name, orNone(names), how)
		}
	}
	if len(names) == 0 {
		return final.Errorf("backend %q is not linked into this bundle, which links no sandbox backend; import the backend's package in the bundle's main package", name)
	}
	return final.Errorf("backend %q is not one this bundle links (%s); use one of those, or build a bundle that imports the backend's package", name, strings.Join(names, ", "))
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// Configure looks name up and parses its options. Errors name the backend.
func (r *Registry) Configure(name string, options json.RawMessage) (Registration, Config, error) {
	b, ok := r.Lookup(name)
	if !ok {
		return Registration{}, nil, r.Unknown(name)
	}
	cfg, err := b.Configure(options)
	if err != nil {
		return b, nil, final.Errorf("backend_options.%s: %w", b.Name, err)
	}
	return b, cfg, nil
}

// Able lists the registered backends whose default capabilities include
// c, for a refusal's "which modal can" (driver.CheckSpec).
func (r *Registry) Able(c driver.Capability) []string {
	var out []string
	for _, n := range r.Names() {
		b, _ := r.Lookup(n)
		if cfg, err := b.Configure(nil); err == nil && cfg.Capabilities().Has(c) {
			out = append(out, n)
		}
	}
	return out
}

// DecodeOptions decodes a backend's options into dst (a pointer to the
// backend's options struct) strictly, for Configure implementations:
// unknown keys and wrong types are errors naming the key.
func DecodeOptions(raw json.RawMessage, dst any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return describe(err)
	}
	return nil
}

// describe turns encoding/json's messages into the config's terms.
func describe(err error) error {
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te):
		return fmt.Errorf("%s: want %s, got a JSON %s", te.Field, te.Type, te.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return fmt.Errorf("unknown option %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return err
}
