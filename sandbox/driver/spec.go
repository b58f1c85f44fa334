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
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"
)

// Defaults applied by Spec.WithDefaults.
const (
	DefaultLifetime = time.Hour
	DefaultWorkdir  = "/workspace"
	// MaxLifetime bounds a sandbox's server-side lifetime: a lost sandbox must
	// not live (and bill) for days.
	MaxLifetime = 24 * time.Hour
)

// NetworkPolicy says what the sandbox may reach. The zero value is the
// blocked network: no network at all (loopback only, DNS included).
// Allowlists on a blocked network deny everything except those
// hosts/CIDRs. Open is the open network; allowlists are then meaningless
// and refused. On the wire (bundle configs, XCom, a sandbox's metadata) it
// is {"block": bool, "allow_hosts": [...], "allow_cidrs": [...]}, as the
// Python provider writes it, "block" true when left out.
type NetworkPolicy struct {
	Open       bool
	AllowHosts []string
	AllowCIDRs []string
}

// networkWire is NetworkPolicy as JSON.
type networkWire struct {
	Block      *bool    `json:"block,omitempty"`
	AllowHosts []string `json:"allow_hosts,omitempty"`
	AllowCIDRs []string `json:"allow_cidrs,omitempty"`
}

// MarshalJSON writes the wire form, block always given.
func (p NetworkPolicy) MarshalJSON() ([]byte, error) {
	block := !p.Open
	return json.Marshal(networkWire{Block: &block, AllowHosts: p.AllowHosts, AllowCIDRs: p.AllowCIDRs})
}

// UnmarshalJSON reads the wire form; a policy that leaves block out is
// blocked. Unknown keys are refused, naming the ones there are: a
// misspelt block must not open nor close a network unnoticed.
func (p *NetworkPolicy) UnmarshalJSON(data []byte) error {
	var w networkWire
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return fmt.Errorf("%v; a network is {block: true|false, allow_hosts: [...], allow_cidrs: [...]}", err)
	}
	*p = NetworkPolicy{Open: w.Block != nil && !*w.Block, AllowHosts: w.AllowHosts, AllowCIDRs: w.AllowCIDRs}
	return nil
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
	GPU string `json:"gpu,omitempty"`
	// Lifetime is the server-side lifetime, always set after WithDefaults
	// ("timeout" on the wire, as sandboxes made before the name have it).
	Lifetime time.Duration     `json:"timeout,omitempty"`
	Workdir  string            `json:"workdir,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	// Network's zero value is the default: blocked, no allowlist.
	Network NetworkPolicy     `json:"network"`
	Owner   string            `json:"owner,omitempty"` // "<dag_id>/<run_id>" of the run that owns it
	Tags    map[string]string `json:"tags,omitempty"`
}

// NetworkPolicy returns the sandbox's network policy.
func (s Spec) NetworkPolicy() NetworkPolicy { return s.Network }

// WithDefaults fills the timeout and workdir.
func (s Spec) WithDefaults() Spec {
	if s.Lifetime == 0 {
		s.Lifetime = DefaultLifetime
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
	if s.Lifetime < 0 {
		add("lifetime", "%v is negative; give a lifetime such as 1h", s.Lifetime)
	} else if s.Lifetime > MaxLifetime {
		add("lifetime", "%v is longer than the %v maximum (a sandbox must not outlive its job by days); give at most 24h", s.Lifetime, MaxLifetime)
	} else if s.Lifetime%time.Second != 0 {
		add("lifetime", "%v is not a whole number of seconds", s.Lifetime)
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
	if n := s.Network; n.Open && (len(n.AllowHosts) > 0 || len(n.AllowCIDRs) > 0) {
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
