package driver

import (
	"fmt"
	"strings"
)

// Capabilities declare what a backend can be asked for. A spec asking for
// anything outside them is refused, naming the field and the backend, by
// the portable layer before the driver is called and by the bundle config
// loader before a bundle is packed; the driver itself still refuses what it
// finds it cannot enforce (a missing prlimit, an unverifiable egress mode).
//
// A capability means the backend enforces the setting, or was configured
// to accept it knowingly (the local backend's ignore_cpu): it never means a
// setting is silently dropped.
type Capabilities struct {
	CPU    bool // Spec.CPU: a cpu limit
	Memory bool // Spec.MemoryMiB: a memory limit
	GPU    bool // Spec.GPU: attached GPUs

	BlockNetwork bool // no network at all (the default spec)
	OpenNetwork  bool // Network{Block: false}: the backend's open network
	AllowHosts   bool // a blocked network except for allow_hosts
	AllowCIDRs   bool // a blocked network except for allow_cidrs

	// Tags: sandboxes carry a tag set (the driver is a Tagger), so they
	// have an owner and can be attached to and handed to an agent.
	Tags bool
	// List: sandboxes can be found by tag (the driver is a Lister), so
	// sweep can remove leftovers.
	List bool
	// Lifetime: the backend itself ends a sandbox when Spec.Timeout runs
	// out, even if no one destroys it: the backstop when a task's cleanup
	// is cut short.
	Lifetime bool
	// Renew: a lifetime can be extended (the driver is a Renewer).
	Renew bool

	// Hints explain, by Refusal field, why the backend lacks a capability
	// or how an option would give it ("set egress_enforcement: sni");
	// refusals quote them.
	Hints map[string]string
}

// Refusal is one spec field a backend cannot honour.
type Refusal struct {
	Field string // as the bundle config names it: "gpu", "network.allow_cidrs", ...
	Need  string // the capability it needs, for messages: "GPUs"
	Hint  string // the backend's explanation, if it gave one
}

// Message is "<field>: the <backend> backend cannot provide <need> (<hint>)".
func (r Refusal) Message(backend string) string {
	msg := fmt.Sprintf("%s: the %s backend cannot provide %s", r.Field, backend, r.Need)
	if r.Hint != "" {
		msg += " (" + r.Hint + ")"
	}
	return msg
}

// Refusals lists what spec asks for that c does not cover, in field order.
func (c Capabilities) Refusals(spec Spec) []Refusal {
	var out []Refusal
	add := func(ok bool, field, need string) {
		if !ok {
			out = append(out, Refusal{Field: field, Need: need, Hint: c.Hints[field]})
		}
	}
	if spec.CPU > 0 {
		add(c.CPU, "cpu", "a cpu limit")
	}
	if spec.MemoryMiB > 0 {
		add(c.Memory, "memory_mib", "a memory limit")
	}
	if spec.GPU != "" {
		add(c.GPU, "gpu", "GPUs")
	}
	net := spec.NetworkPolicy()
	switch {
	case !net.Block:
		add(c.OpenNetwork, "network.block", "an open network (block: false)")
	case len(net.AllowHosts) == 0 && len(net.AllowCIDRs) == 0:
		add(c.BlockNetwork, "network.block", "a blocked network")
	}
	if net.Block && len(net.AllowHosts) > 0 {
		add(c.AllowHosts, "network.allow_hosts", "host allowlists")
	}
	if net.Block && len(net.AllowCIDRs) > 0 {
		add(c.AllowCIDRs, "network.allow_cidrs", "CIDR allowlists")
	}
	return out
}

// Has reports whether c offers the capability a Refusal.Field needs; it
// lets callers list the backends that could take a refused spec.
func (c Capabilities) Has(field string) bool {
	switch field {
	case "cpu":
		return c.CPU
	case "memory_mib":
		return c.Memory
	case "gpu":
		return c.GPU
	case "network.allow_hosts":
		return c.AllowHosts
	case "network.allow_cidrs":
		return c.AllowCIDRs
	}
	return false
}

// CheckSpec refuses (ErrRefused, terminal) a spec that asks backend for
// something outside caps, naming every such field and the backend.
func CheckSpec(backend string, caps Capabilities, spec Spec) error {
	r := caps.Refusals(spec)
	if len(r) == 0 {
		return nil
	}
	parts := make([]string, len(r))
	for i, x := range r {
		parts[i] = x.Message(backend)
	}
	return Refused("%s; remove the setting or choose a backend that can", strings.Join(parts, "; "))
}

// String lists the capabilities that are set, for logs and docs.
func (c Capabilities) String() string {
	var on []string
	for _, f := range []struct {
		ok   bool
		name string
	}{{c.CPU, "cpu"}, {c.Memory, "memory"}, {c.GPU, "gpu"}, {c.BlockNetwork, "block-network"}, {c.OpenNetwork, "open-network"},
		{c.AllowHosts, "allow-hosts"}, {c.AllowCIDRs, "allow-cidrs"}, {c.Tags, "tags"}, {c.List, "list"}, {c.Lifetime, "lifetime"}, {c.Renew, "renew"}} {
		if f.ok {
			on = append(on, f.name)
		}
	}
	return strings.Join(on, ",")
}
