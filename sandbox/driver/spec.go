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

// Problem is one thing a check finds wrong with a spec: the field at
// fault, as the spec's JSON names it (timeout, workdir,
// network.allow_hosts), and what is wrong and what to do instead. Callers
// that show a spec under other names (a bundle config calls timeout
// lifetime) rename the field with JoinProblems.
type Problem struct {
	Field string
	Msg   string
}

func (p Problem) String() string { return p.Field + ": " + p.Msg }

// JoinProblems writes problems as "field: msg; ...", each field renamed
// as names maps it (nil: the spec's own names).
func JoinProblems(ps []Problem, names map[string]string) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		if n, ok := names[p.Field]; ok {
			p.Field = n
		}
		parts[i] = p.String()
	}
	return strings.Join(parts, "; ")
}

// Validate checks the spec independent of any backend. Messages name the field.
func (s Spec) Validate() error {
	if ps := s.Problems(); len(ps) > 0 {
		return Refused("sandbox spec is invalid: %s", JoinProblems(ps, nil))
	}
	return nil
}

// Problems lists what Validate refuses, with no I/O, so a bundle config's
// defaults can be checked when the config loads.
func (s Spec) Problems() []Problem {
	var ps []Problem
	add := func(field, format string, a ...any) { ps = append(ps, Problem{field, fmt.Sprintf(format, a...)}) }
	if s.CPU < 0 {
		add("cpu", "%v is negative; give a number of cores such as 0.5 or 2, or leave cpu out for the backend's default", s.CPU)
	}
	if s.MemoryMiB < 0 {
		add("memory_mib", "%d is negative; give MiB such as 2048", s.MemoryMiB)
	}
	if s.Timeout < 0 {
		add("timeout", "%v is negative; give a lifetime such as 1h", s.Timeout)
	} else if s.Timeout > MaxTimeout {
		add("timeout", "%v is longer than the %v maximum (a sandbox must not outlive its job by days); give at most 24h", s.Timeout, MaxTimeout)
	} else if s.Timeout%time.Second != 0 {
		add("timeout", "%v is not a whole number of seconds", s.Timeout)
	}
	if s.Workdir != "" && (!path.IsAbs(s.Workdir) || path.Clean(s.Workdir) != s.Workdir) {
		add("workdir", "%q must be a clean absolute path such as /workspace", s.Workdir)
	}
	if s.GPU != "" && strings.TrimSpace(s.GPU) != s.GPU {
		add("gpu", "%q has surrounding spaces", s.GPU)
	}
	for _, e := range EnvProblems(s.Env) {
		add("env", "%s", strings.TrimPrefix(e, "env: "))
	}
	if n := s.Network; n != nil && !n.Block && (len(n.AllowHosts) > 0 || len(n.AllowCIDRs) > 0) {
		field := "network.allow_hosts"
		if len(n.AllowHosts) == 0 {
			field = "network.allow_cidrs"
		}
		add(field, "an allowlist only narrows a blocked network; set network.block: true to allow just those, or drop allow_hosts and allow_cidrs for an open network")
	}
	if s.Owner != "" && !strings.Contains(s.Owner, "/") {
		add("owner", "%q is not of the form <dag_id>/<run_id>; leave owner out for the Dag run's own", s.Owner)
	}
	for _, k := range slices.Sorted(maps.Keys(s.Tags)) {
		if k == "" {
			add("tags", "empty tag name")
		}
	}
	return ps
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
