package driver

import (
	"fmt"
	"strings"
)

// Capabilities declare what a backend can be asked for. A spec asking for
// anything outside them is refused, naming the field and the backend, by
// the portable layer before the driver is called and by the bundle config
// loader before a bundle is packed (CheckBackend); the driver itself
// refuses only what it alone finds it cannot enforce (a missing prlimit,
// an unverifiable egress mode).
//
// A capability means the backend enforces the setting, or was configured
// to accept it knowingly (the local backend's ignore_cpu): it never means a
// setting is silently dropped.
type Capabilities struct {
	CPU    bool // Spec.CPU: a cpu limit
	Memory bool // Spec.MemoryMiB: a memory limit
	GPU    bool // Spec.GPU: attached GPUs

	BlockNetwork bool // no network at all (the default spec)
	OpenNetwork  bool // Network{Open: true}: the backend's open network
	AllowHosts   bool // a blocked network except for allow_hosts
	AllowCIDRs   bool // a blocked network except for allow_cidrs

	// Tags: sandboxes carry a tag set (the driver is a Tagger), so they
	// have an owner and can be attached to and handed to an agent.
	Tags bool
	// List: sandboxes can be found by tag (the driver is a Lister), so
	// sweep can remove leftovers.
	List bool
	// Lifetime: the backend itself ends a sandbox when Spec.Lifetime runs
	// out, even if no one destroys it: the backstop when a task's cleanup
	// is cut short.
	Lifetime bool
	// Renew: a lifetime can be extended (the driver is a Renewer).
	Renew bool

	// Hints explain, by capability, why the backend lacks it or how an
	// option would give it ("set egress_enforcement: sni"); refusals quote
	// them.
	Hints map[Capability]string
}

// Capability is one thing a backend may offer. The table below is the one
// place that says, for each, the spec field that asks for it and what a
// refusal calls it; Has, Needs and the refusals all read it.
type Capability uint8

const (
	CapCPU          Capability = iota + 1 // Spec.CPU: a cpu limit
	CapMemory                             // Spec.MemoryMiB: a memory limit
	CapGPU                                // Spec.GPU: attached GPUs
	CapBlockNetwork                       // network.block: true with no allowlist (the default)
	CapOpenNetwork                        // network.block: false
	CapAllowHosts                         // a blocked network except for allow_hosts
	CapAllowCIDRs                         // a blocked network except for allow_cidrs
	CapTags                               // sandboxes carry tags (Tagger)
	CapList                               // sandboxes can be listed (Lister)
	CapLifetime                           // the backend ends a sandbox at its lifetime
	CapRenew                              // a lifetime can be extended (Renewer)
)

var capabilityTable = [...]struct {
	name  string // in Capabilities.String
	field string // the spec field, as the bundle config names it ("" if none asks)
	need  string // what a refusal says the backend cannot provide
}{
	CapCPU:          {"cpu", "cpu", "a cpu limit"},
	CapMemory:       {"memory", "memory_mib", "a memory limit"},
	CapGPU:          {"gpu", "gpu", "GPUs"},
	CapBlockNetwork: {"block-network", "network.block", "a blocked network"},
	CapOpenNetwork:  {"open-network", "network.block", "an open network (block: false)"},
	CapAllowHosts:   {"allow-hosts", "network.allow_hosts", "host allowlists"},
	CapAllowCIDRs:   {"allow-cidrs", "network.allow_cidrs", "CIDR allowlists"},
	CapTags:         {"tags", "", "tags"},
	CapList:         {"list", "", "listing"},
	CapLifetime:     {"lifetime", "", "a server-side lifetime"},
	CapRenew:        {"renew", "", "renewal"},
}

// String is the capability's short name ("open-network").
func (c Capability) String() string { return capabilityTable[c].name }

// Field is the spec field that asks for c, as the bundle config names it.
func (c Capability) Field() string { return capabilityTable[c].field }

// Has reports whether c offers cap.
func (c Capabilities) Has(cap Capability) bool {
	switch cap {
	case CapCPU:
		return c.CPU
	case CapMemory:
		return c.Memory
	case CapGPU:
		return c.GPU
	case CapBlockNetwork:
		return c.BlockNetwork
	case CapOpenNetwork:
		return c.OpenNetwork
	case CapAllowHosts:
		return c.AllowHosts
	case CapAllowCIDRs:
		return c.AllowCIDRs
	case CapTags:
		return c.Tags
	case CapList:
		return c.List
	case CapLifetime:
		return c.Lifetime
	case CapRenew:
		return c.Renew
	}
	return false
}

// Needs lists the capabilities spec asks of a backend, in field order.
func Needs(spec Spec) []Capability {
	var out []Capability
	if spec.CPU > 0 {
		out = append(out, CapCPU)
	}
	if spec.MemoryMiB > 0 {
		out = append(out, CapMemory)
	}
	if spec.GPU != "" {
		out = append(out, CapGPU)
	}
	net := spec.NetworkPolicy()
	switch {
	case net.Open:
		out = append(out, CapOpenNetwork)
	case len(net.AllowHosts) == 0 && len(net.AllowCIDRs) == 0:
		out = append(out, CapBlockNetwork)
	}
	if !net.Open && len(net.AllowHosts) > 0 {
		out = append(out, CapAllowHosts)
	}
	if !net.Open && len(net.AllowCIDRs) > 0 {
		out = append(out, CapAllowCIDRs)
	}
	return out
}

// Refusal is one capability a spec needs that a backend lacks.
type Refusal struct {
	Cap  Capability
	Hint string // the backend's explanation, if it gave one
}

// Message is "<field>: the <backend> backend cannot provide <need> (<hint>)".
func (r Refusal) Message(backend string) string {
	msg := fmt.Sprintf("%s: the %s backend cannot provide %s", r.Cap.Field(), backend, capabilityTable[r.Cap].need)
	if r.Hint != "" {
		msg += " (" + r.Hint + ")"
	}
	return msg
}

// Refusals lists what spec needs that c does not cover, in field order.
func (c Capabilities) Refusals(spec Spec) []Refusal {
	var out []Refusal
	for _, need := range Needs(spec) {
		if !c.Has(need) {
			out = append(out, Refusal{Cap: need, Hint: c.Hints[need]})
		}
	}
	return out
}

// CheckSpec refuses what spec needs that caps lack: ErrRefused (final)
// naming every such field and the backend, with the backend's hints; able,
// when not nil, names the backends that could (the registry's Able), so
// the message says where to go. CheckBackend, the one refusal of a spec,
// runs it first.
func CheckSpec(backend string, caps Capabilities, spec Spec, able func(Capability) []string) error {
	refused := caps.Refusals(spec)
	if len(refused) == 0 {
		return nil
	}
	parts := make([]string, len(refused))
	for i, r := range refused {
		parts[i] = r.Message(backend)
		if able == nil {
			continue
		}
		if others := able(r.Cap); len(others) > 0 {
			parts[i] += ", which " + strings.Join(others, " and ") + " can"
		}
	}
	return &Error{Op: "sandbox spec", Kind: ErrRefused,
		Err: fmt.Errorf("%s; remove the setting or choose another backend", strings.Join(parts, "; "))}
}

// SpecChecker is a backend's own rules on a spec that need no I/O (no host
// probe, no server), beyond what its capabilities say: the local backend
// refusing a registry image, Modal a lifetime under its minimum. A driver
// implements it for the portable layer, which applies it before Create; a
// backend's registry.Config implements it for the bundle config loader,
// which applies it when a bundle loads. One function of the backend's
// serves both.
type SpecChecker interface {
	// SpecProblems lists what the backend refuses in spec (WithDefaults
	// applied), naming the spec's fields as a bundle config does.
	SpecProblems(spec Spec) []Problem
}

// CheckBackend is the one refusal of a spec by a backend: CheckSpec (what
// caps lack), then what rules (nil: none) list, as ErrRefused naming the
// backend. The portable layer calls it before Create with the driver's
// capabilities and rules; tasks call it with a registry.Config's when a
// bundle config loads, so both refuse in the same words.
func CheckBackend(backend string, caps Capabilities, rules SpecChecker, spec Spec, able func(Capability) []string) error {
	if err := CheckSpec(backend, caps, spec, able); err != nil {
		return err
	}
	if rules == nil {
		return nil
	}
	if ps := rules.SpecProblems(spec); len(ps) > 0 {
		return &Error{Op: "sandbox spec", Kind: ErrRefused,
			Err: fmt.Errorf("the %s backend refuses this sandbox: %s", backend, JoinProblems(ps, nil))}
	}
	return nil
}

// String lists the capabilities that are set, for logs and docs.
func (c Capabilities) String() string {
	var on []string
	for cap := CapCPU; int(cap) < len(capabilityTable); cap++ {
		if c.Has(cap) {
			on = append(on, cap.String())
		}
	}
	return strings.Join(on, ",")
}
