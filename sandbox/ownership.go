package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airflow-sandbox/airflow-go-worker/internal/randhex"
)

// NamePrefix starts every sandbox name.
const NamePrefix = "airflow-sandbox-"

// NewName returns airflow-sandbox-<12 lowercase hex>.
func NewName() string { return NamePrefix + RandomHex(6) }

// RandomHex returns 2n lowercase hex characters from crypto/rand.
func RandomHex(n int) string { return randhex.String(n) }

// OwnerFor is the owner string of a Dag run: "<dag_id>/<run_id>".
func OwnerFor(dagID, runID string) string { return dagID + "/" + runID }

// HolderFor is the holder string of a task instance, as Python builds it:
// "<dag_id>/<run_id>/<task_id>", plus "[<map_index>]" when mapped.
func HolderFor(dagID, runID, taskID string, mapIndex int) string {
	h := dagID + "/" + runID + "/" + taskID
	if mapIndex >= 0 {
		h += "[" + strconv.Itoa(mapIndex) + "]"
	}
	return h
}

// pyNetworkPolicy has the Python provider's field names, alphabetically, so
// encoding/json writes them in the sorted order Python's sort_keys gives.
type pyNetworkPolicy struct {
	AllowEgressTo      []string `json:"allow_egress_to"`
	AllowEgressToCIDRs []string `json:"allow_egress_to_cidrs"`
	BlockNetwork       bool     `json:"block_network"`
}

// EncodeNetworkPolicy writes the policy byte for byte as Python's
// json.dumps(..., sort_keys=True, separators=(",", ":")) does: compact,
// sorted keys, empty lists rather than null, non-ASCII as \uXXXX.
func EncodeNetworkPolicy(p NetworkPolicy) string {
	v := pyNetworkPolicy{AllowEgressTo: p.AllowHosts, AllowEgressToCIDRs: p.AllowCIDRs, BlockNetwork: !p.Open}
	if v.AllowEgressTo == nil {
		v.AllowEgressTo = []string{}
	}
	if v.AllowEgressToCIDRs == nil {
		v.AllowEgressToCIDRs = []string{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // Python does not escape <, >, &
	if err := enc.Encode(v); err != nil {
		panic(err) // strings and bools always encode
	}
	return asciiEscape(strings.TrimSuffix(buf.String(), "\n"))
}

// asciiEscape turns non-ASCII runes and DEL into \uXXXX (surrogate pairs
// above the BMP), as Python's ensure_ascii does. Input is valid JSON, so every
// non-ASCII rune sits inside a string.
func asciiEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == 0x7f: // ASCII, but Python escapes everything outside ' '..'~'
			b.WriteString(`\u007f`)
		case r < utf8.RuneSelf:
			b.WriteRune(r)
		case r > 0xFFFF:
			r -= 0x10000
			fmt.Fprintf(&b, `\u%04x\u%04x`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// DecodeNetworkPolicy reads an airflow_network tag value.
func DecodeNetworkPolicy(s string) (NetworkPolicy, error) {
	var v pyNetworkPolicy
	dec := json.NewDecoder(strings.NewReader(s))
	if err := dec.Decode(&v); err != nil {
		return NetworkPolicy{}, fmt.Errorf("airflow_network tag %q is not a network policy: %v", s, err)
	}
	return NetworkPolicy{Open: !v.BlockNetwork, AllowHosts: v.AllowEgressTo, AllowCIDRs: v.AllowEgressToCIDRs}, nil
}

// OwnershipTags are the tags Create stamps on a sandbox. Author tags are
// merged first so that airflow_* tags always win, as in Python.
func OwnershipTags(name string, spec Spec, now time.Time) map[string]string {
	tags := make(map[string]string, len(spec.Tags)+7)
	for k, v := range spec.Tags {
		tags[k] = v
	}
	tags[TagSandbox] = name
	tags[TagCreatedBy] = CreatedByValue
	tags[TagExpiresAt] = strconv.FormatInt(now.Add(spec.Lifetime).Unix(), 10)
	tags[TagNetwork] = EncodeNetworkPolicy(spec.NetworkPolicy())
	if spec.Workdir != "" {
		tags[TagWorkdir] = spec.Workdir
	}
	if spec.Owner != "" {
		tags[TagOwner] = spec.Owner
	} else {
		delete(tags, TagOwner)
	}
	delete(tags, TagHolder) // a new sandbox is held by nobody
	return tags
}
