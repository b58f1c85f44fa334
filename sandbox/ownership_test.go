package sandbox

import (
	"regexp"
	"strconv"
	"testing"
	"time"
)

func TestEncodeNetworkPolicyMatchesPython(t *testing.T) {
	cases := []struct {
		name string
		in   NetworkPolicy
		want string // what Python's json.dumps(sort_keys=True, separators=(",", ":")) gives
	}{
		{"default blocked", NetworkPolicy{},
			`{"allow_egress_to":[],"allow_egress_to_cidrs":[],"block_network":true}`},
		{"open", NetworkPolicy{Open: true},
			`{"allow_egress_to":[],"allow_egress_to_cidrs":[],"block_network":false}`},
		{"allowlists", NetworkPolicy{AllowHosts: []string{"pypi.org", "files.pythonhosted.org"}, AllowCIDRs: []string{"10.0.0.0/8"}},
			`{"allow_egress_to":["pypi.org","files.pythonhosted.org"],"allow_egress_to_cidrs":["10.0.0.0/8"],"block_network":true}`},
		// Non-ASCII as lowercase \uXXXX, astral runes as surrogate pairs,
		// and <, >, & left alone: all as Python writes them.
		{"non-ascii", NetworkPolicy{AllowHosts: []string{"bücher.de", "\U0001F600<&>"}},
			`{"allow_egress_to":["b\u00fccher.de","\ud83d\ude00<&>"],"allow_egress_to_cidrs":[],"block_network":true}`},
		{"control chars", NetworkPolicy{AllowHosts: []string{"a\"b\\c\n\x01"}},
			`{"allow_egress_to":["a\"b\\c\n\u0001"],"allow_egress_to_cidrs":[],"block_network":true}`},
		// DEL is ASCII but not printable: Python escapes it; \b, \f and
		// U+2028 as Python writes them.
		{"DEL and short escapes", NetworkPolicy{AllowHosts: []string{"a\x7f\b\f\u2028\t"}},
			`{"allow_egress_to":["a\u007f\b\f\u2028\t"],"allow_egress_to_cidrs":[],"block_network":true}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := EncodeNetworkPolicy(c.in)
			if got != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
			back, err := DecodeNetworkPolicy(got)
			if err != nil {
				t.Fatal(err)
			}
			if back.Open != c.in.Open || len(back.AllowHosts) != len(c.in.AllowHosts) || len(back.AllowCIDRs) != len(c.in.AllowCIDRs) {
				t.Fatalf("decode(encode(%+v)) = %+v", c.in, back)
			}
			for i := range back.AllowHosts {
				if back.AllowHosts[i] != c.in.AllowHosts[i] {
					t.Fatalf("host %d: %q != %q", i, back.AllowHosts[i], c.in.AllowHosts[i])
				}
			}
		})
	}
}

func TestDecodeNetworkPolicyRejectsGarbage(t *testing.T) {
	if _, err := DecodeNetworkPolicy("not json"); err == nil {
		t.Fatal("want an error for a malformed airflow_network tag")
	}
}

func TestOwnershipTags(t *testing.T) {
	now := time.Unix(1_800_000_000, 500_000_000)
	spec := Spec{
		Lifetime: 90 * time.Minute, Workdir: "/workspace", Owner: "etl/manual__2026",
		Network: NetworkPolicy{AllowHosts: []string{"pypi.org"}},
		Tags: map[string]string{
			"team":       "data",
			TagOwner:     "spoofed",
			TagSandbox:   "spoofed",
			TagHolder:    "someone",
			TagExpiresAt: "1",
		},
	}
	tags := OwnershipTags("airflow-sandbox-0123456789ab", spec, now)
	want := map[string]string{
		"team":       "data",
		TagOwner:     "etl/manual__2026",
		TagSandbox:   "airflow-sandbox-0123456789ab",
		TagExpiresAt: strconv.FormatInt(1_800_000_000+90*60, 10),
		TagNetwork:   `{"allow_egress_to":["pypi.org"],"allow_egress_to_cidrs":[],"block_network":true}`,
		TagWorkdir:   "/workspace",
		TagCreatedBy: CreatedByValue,
	}
	if len(tags) != len(want) {
		t.Errorf("got %d tags %v, want %d", len(tags), tags, len(want))
	}
	for k, v := range want {
		if tags[k] != v {
			t.Errorf("%s = %q, want %q", k, tags[k], v)
		}
	}
	if _, ok := tags[TagHolder]; ok {
		t.Error("a new sandbox must not carry a holder")
	}
	if spec.Tags[TagOwner] != "spoofed" {
		t.Error("OwnershipTags modified the spec's own map")
	}
	if got := ExpiresAt(tags); !got.Equal(time.Unix(1_800_000_000+90*60, 0)) {
		t.Errorf("ExpiresAt = %v", got)
	}

	// Without an owner, an author's airflow_owner tag is dropped, not kept.
	noOwner := OwnershipTags("airflow-sandbox-0123456789ab", Spec{Lifetime: time.Hour, Tags: map[string]string{TagOwner: "spoofed"}}, now)
	if _, ok := noOwner[TagOwner]; ok {
		t.Errorf("author-set airflow_owner survived: %v", noOwner)
	}
	if _, ok := noOwner[TagWorkdir]; ok {
		t.Errorf("airflow_workdir set though no workdir was chosen: %v", noOwner)
	}
}

func TestExpiresAtMalformed(t *testing.T) {
	for _, v := range []string{"", "soon", "1.5"} {
		if got := ExpiresAt(map[string]string{TagExpiresAt: v}); !got.IsZero() {
			t.Errorf("ExpiresAt(%q) = %v, want zero", v, got)
		}
	}
}

func TestHolderAndOwner(t *testing.T) {
	if got := HolderFor("dag", "run_1", "agent", -1); got != "dag/run_1/agent" {
		t.Errorf("unmapped holder = %q", got)
	}
	if got := HolderFor("dag", "run_1", "agent", 3); got != "dag/run_1/agent[3]" {
		t.Errorf("mapped holder = %q", got)
	}
	if got := HolderFor("dag", "run_1", "agent", 0); got != "dag/run_1/agent[0]" {
		t.Errorf("map index 0 must still be written: %q", got)
	}
	if got := OwnerFor("dag", "run_1"); got != "dag/run_1" {
		t.Errorf("owner = %q", got)
	}
}

func TestNewName(t *testing.T) {
	re := regexp.MustCompile(`^airflow-sandbox-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 100 {
		n := NewName()
		if !re.MatchString(n) {
			t.Fatalf("name %q is not airflow-sandbox-<12 hex>", n)
		}
		if seen[n] {
			t.Fatalf("duplicate name %q", n)
		}
		seen[n] = true
	}
}
