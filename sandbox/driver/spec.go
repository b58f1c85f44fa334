// Package driver is what a sandbox backend implements: the Driver interface
// and its optional feature interfaces, the types they exchange, the error
// kinds every driver reports, and Capabilities. Users and tasks program
// against package sandbox, the portable layer over it; a backend is a
// package that implements Driver and registers itself with sandbox/registry
// (see docs/ARCHITECTURE.md, "The backend plug-in contract").
//
// The package knows nothing of Airflow.
package driver

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"
)

// Defaults applied by Spec.WithDefaults.
const (
	DefaultTimeout = time.Hour
	DefaultWorkdir = "/workspace"
	// MaxTimeout bounds a sandbox's server-side lifetime: a lost sandbox must
	// not live (and bill) for days.
	MaxTimeout = 24 * time.Hour
)

// NetworkPolicy says what the sandbox may reach. Block with no allowlist
// means no network at all (loopback only, DNS included). Block with
// allowlists means deny everything except those hosts/CIDRs. Block=false is
// the open network; allowlists are then meaningless and refused.
type NetworkPolicy struct {
	Block      bool     `json:"block"`
	AllowHosts []string `json:"allow_hosts,omitempty"`
	AllowCIDRs []string `json:"allow_cidrs,omitempty"`
}

// Spec describes the sandbox to create. A driver that cannot enforce a field
// it was given refuses the spec (ErrRefused); it never provisions a weaker
// sandbox than asked for.
type Spec struct {
	Image     string  `json:"image,omitempty"`
	CPU       float64 `json:"cpu,omitempty"`        // cores; 0 = backend default
	MemoryMiB int     `json:"memory_mib,omitempty"` // 0 = backend default
	// GPU is the backend's GPU type and count, e.g. "A10G" or "A100:2";
	// "" = none.
	GPU     string            `json:"gpu,omitempty"`
	Timeout time.Duration     `json:"timeout,omitempty"` // server-side lifetime; always set after WithDefaults
	Workdir string            `json:"workdir,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Network nil means the default: blocked, no allowlist.
	Network *NetworkPolicy    `json:"network,omitempty"`
	Owner   string            `json:"owner,omitempty"` // "<dag_id>/<run_id>" of the run that owns it
	Tags    map[string]string `json:"tags,omitempty"`
}

// NetworkPolicy returns the effective policy (the default when unset).
func (s Spec) NetworkPolicy() NetworkPolicy {
	if s.Network == nil {
		return NetworkPolicy{Block: true}
	}
	return *s.Network
}

// WithDefaults fills the timeout and workdir.
func (s Spec) WithDefaults() Spec {
	if s.Timeout == 0 {
		s.Timeout = DefaultTimeout
	}
	if s.Workdir == "" {
		s.Workdir = DefaultWorkdir
	}
	return s
}

// Validate checks the spec independent of any backend. Messages name the field.
func (s Spec) Validate() error {
	var errs []string
	add := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	if s.CPU < 0 {
		add("cpu: %v is negative; give a number of cores such as 0.5 or 2", s.CPU)
	}
	if s.MemoryMiB < 0 {
		add("memory_mib: %d is negative; give MiB such as 2048", s.MemoryMiB)
	}
	if s.Timeout < 0 {
		add("timeout: %v is negative; give a lifetime such as 1h", s.Timeout)
	} else if s.Timeout > MaxTimeout {
		add("timeout: %v is longer than the %v maximum; a sandbox must not outlive its job by days", s.Timeout, MaxTimeout)
	} else if s.Timeout%time.Second != 0 {
		add("timeout: %v is not a whole number of seconds", s.Timeout)
	}
	if s.Workdir != "" && (!path.IsAbs(s.Workdir) || path.Clean(s.Workdir) != s.Workdir) {
		add("workdir: %q must be a clean absolute path such as /workspace", s.Workdir)
	}
	if s.GPU != "" && strings.TrimSpace(s.GPU) != s.GPU {
		add("gpu: %q has surrounding spaces", s.GPU)
	}
	errs = append(errs, EnvProblems(s.Env)...)
	if n := s.Network; n != nil && !n.Block && (len(n.AllowHosts) > 0 || len(n.AllowCIDRs) > 0) {
		add("network: allow_hosts/allow_cidrs only narrow a blocked network; set block: true to allow just those, or drop the lists for an open network")
	}
	if s.Owner != "" && !strings.Contains(s.Owner, "/") {
		add("owner: %q is not of the form <dag_id>/<run_id>", s.Owner)
	}
	for _, k := range slices.Sorted(maps.Keys(s.Tags)) {
		if k == "" {
			add("tags: empty tag name")
		}
	}
	if len(errs) > 0 {
		return Refused("sandbox spec is invalid: %s", strings.Join(errs, "; "))
	}
	return nil
}

// EnvProblems lists what is wrong with an environment, naming variables but
// never their values (which may be secrets). No OS environment can hold a
// NUL byte, and a name cannot be empty or hold '='.
func EnvProblems(env map[string]string) []string {
	var errs []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			errs = append(errs, fmt.Sprintf("env: %q is not a valid variable name", k))
		}
		if strings.ContainsRune(env[k], 0) {
			errs = append(errs, fmt.Sprintf("env: value of %s contains a NUL byte", k))
		}
	}
	return errs
}
