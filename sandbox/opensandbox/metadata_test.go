package opensandbox

import (
	"maps"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

func TestTagsRoundTripThroughLabelSafeMetadata(t *testing.T) {
	spec := sandbox.Spec{Owner: "my_dag/manual__2026-11-29T15:58:40.123456+00:00", Lifetime: time.Hour, Workdir: "/workspace",
		Network: sandbox.NetworkPolicy{AllowHosts: []string{"pypi.org", "*.python.org"}}}
	tags := sandbox.OwnershipTags("airflow-sandbox-0123456789ab", spec, time.Unix(1767225600, 0))
	tags[sandbox.TagHolder] = sandbox.HolderFor("my_dag", "manual__2026", "agent", 3)
	tags["team"] = "data"
	tags["empty"] = ""
	tags["unicode"] = "ü ✓ 日本"
	tags["looks-encoded"] = "b32.1.abc"
	tags["long"] = strings.Repeat("0123456789/", 200)

	meta, err := encodeTags(tags)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range meta {
		if len(k) > 63 || !isLabel(k) {
			t.Errorf("metadata key %q is not label-safe", k)
		}
		if !isLabelValue(v) {
			t.Errorf("metadata value %q (key %s) is not label-safe", v, k)
		}
	}
	// Readable values stay readable (and filterable on the server).
	if meta[sandbox.TagSandbox] != "airflow-sandbox-0123456789ab" || meta[sandbox.TagCreatedBy] != sandbox.CreatedByValue || meta["team"] != "data" {
		t.Errorf("plain values were encoded: %v", meta)
	}
	if meta[sandbox.TagExpiresAt] != "1767229200" {
		t.Errorf("expires_at = %q", meta[sandbox.TagExpiresAt])
	}
	// The Python provider's keys are not tags.
	meta[metaCreatedBy] = metaCreatedByValue
	meta[metaName] = "airflow-sandbox-0123456789ab"
	if got := decodeTags(meta); !maps.Equal(got, tags) {
		t.Fatalf("round trip\n got %v\nwant %v", got, tags)
	}
}

func TestTagKeyRefusals(t *testing.T) {
	for _, key := range []string{"name", "created-by", "has space", "slash/key", "-lead", strings.Repeat("k", 56), "owner--2"} {
		if _, err := encodeTags(map[string]string{key: "v"}); err == nil {
			t.Errorf("key %q was accepted", key)
		} else if !strings.Contains(err.Error(), key) {
			t.Errorf("error does not name %q: %v", key, err)
		}
	}
	if _, err := encodeTags(map[string]string{"huge": strings.Repeat("x", 4000)}); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Errorf("a 4000-byte value: %v", err)
	}
}

func TestDecodeToleratesForeignMetadata(t *testing.T) {
	// A sandbox the Python provider created, plus a damaged encoded value.
	meta := map[string]string{"created-by": "airflow", "name": "airflow-sandbox-aaaaaaaaaaaa", "env": "prod", "broken": "b32.2.mfrgg"}
	got := decodeTags(meta)
	want := map[string]string{"env": "prod", "broken": "b32.2.mfrgg"}
	if !maps.Equal(got, want) {
		t.Fatalf("got %v want %v", got, want)
	}
}

func TestMetadataPatch(t *testing.T) {
	cur := map[string]string{"name": "n", "created-by": "airflow", "a": "1", "gone": "x", "long--2": "y"}
	want := map[string]string{"a": "1", "b": "2"}
	patch := metadataPatch(cur, want, map[string]bool{"name": true, "created-by": true})
	if len(patch) != 3 || patch["gone"] != nil || patch["long--2"] != nil || patch["b"] == nil || *patch["b"] != "2" {
		t.Fatalf("patch %v", patch)
	}
	if _, ok := patch["name"]; ok {
		t.Fatal("patch touches the kept name key")
	}
}

func TestCreateRequestMapping(t *testing.T) {
	d, err := New(Options{Config: configFor("127.0.0.1:1")})
	if err != nil {
		t.Fatal(err)
	}
	base := sandbox.Spec{Lifetime: time.Hour, Workdir: "/workspace", Tags: map[string]string{"k": "v"}}
	cases := []struct {
		cpu       float64
		mem       int
		wantCPU   string
		wantMem   string
		wantError string
	}{
		{0, 0, "1", "2Gi", ""},
		{1, 1024, "1", "1024Mi", ""},
		{2, 0, "2", "2Gi", ""},
		{0.5, 0, "500m", "2Gi", ""},
		{2.25, 0, "2250m", "2Gi", ""},
		{0.0001, 0, "", "", "0.001-core"},
	}
	for _, c := range cases {
		spec := base
		spec.CPU, spec.MemoryMiB = c.cpu, c.mem
		req, err := d.createRequest("airflow-sandbox-x", spec)
		if c.wantError != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantError) {
				t.Errorf("cpu %v: err %v", c.cpu, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if req.ResourceLimits["cpu"] != c.wantCPU || req.ResourceLimits["memory"] != c.wantMem {
			t.Errorf("cpu %v mem %d: limits %v", c.cpu, c.mem, req.ResourceLimits)
		}
	}

	refused := []struct {
		name string
		edit func(*sandbox.Spec)
		want string
	}{
		{"short lifetime", func(s *sandbox.Spec) { s.Lifetime = 59 * time.Second }, "at least 1m0s"},
		{"cidr allowlist", func(s *sandbox.Spec) {
			s.Network = sandbox.NetworkPolicy{AllowCIDRs: []string{"10.0.0.0/8"}}
		}, "allow_cidrs"},
		{"ip in allow_hosts", func(s *sandbox.Spec) {
			s.Network = sandbox.NetworkPolicy{AllowHosts: []string{"pypi.org", "10.1.2.3"}}
		}, `"10.1.2.3" is an IP address`},
		{"cidr in allow_hosts", func(s *sandbox.Spec) {
			s.Network = sandbox.NetworkPolicy{AllowHosts: []string{"10.0.0.0/8"}}
		}, `"10.0.0.0/8" is an IP range`},
		{"ipv6 in allow_hosts", func(s *sandbox.Spec) {
			s.Network = sandbox.NetworkPolicy{AllowHosts: []string{"2001:db8::1"}}
		}, "is an IP"},
		{"url in allow_hosts", func(s *sandbox.Spec) {
			s.Network = sandbox.NetworkPolicy{AllowHosts: []string{"https://pypi.org/simple"}}
		}, "is not a host name"},
		{"bad tag key", func(s *sandbox.Spec) { s.Tags = map[string]string{"bad key": "v"} }, `"bad key"`},
	}
	for _, r := range refused {
		spec := base
		r.edit(&spec)
		_, err := d.createRequest("airflow-sandbox-x", spec)
		if err == nil || !strings.Contains(err.Error(), r.want) || !sandboxIsRefused(err) {
			t.Errorf("%s: %v", r.name, err)
		}
	}

	// Networks: default blocked, allowlist, open.
	req, _ := d.createRequest("n", base)
	if p := req.NetworkPolicy; p == nil || p.DefaultAction != "deny" || len(p.Egress) != 0 {
		t.Errorf("default network: %+v", req.NetworkPolicy)
	}
	spec := base
	spec.Network = sandbox.NetworkPolicy{AllowHosts: []string{"pypi.org", "files.pythonhosted.org"}}
	req, _ = d.createRequest("n", spec)
	if p := req.NetworkPolicy; p == nil || len(p.Egress) != 2 || p.Egress[1].Action != "allow" || p.Egress[1].Target != "files.pythonhosted.org" {
		t.Errorf("allowlist: %+v", req.NetworkPolicy)
	}
	spec.Network = sandbox.NetworkPolicy{Open: true}
	if req, _ = d.createRequest("n", spec); req.NetworkPolicy != nil {
		t.Errorf("open network sent a policy: %+v", req.NetworkPolicy)
	}
	if req.Metadata[metaCreatedBy] != "airflow" || req.Metadata[metaName] != "n" || req.Metadata["k"] != "v" {
		t.Errorf("metadata %v", req.Metadata)
	}
}

// The label checks are loops (no regexp compiled at start-up); they must
// accept exactly what the patterns they replaced accept.
func TestLabelChecksMatchTheirPatterns(t *testing.T) {
	label := regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	continuation := regexp.MustCompile(`^(.+)--([0-9]+)$`)
	for _, s := range []string{"", "a", "-", "a-", "-a", "a.b", "a_b-c.d9", "A", "a b", "é", "a--1", "--1", "a--", "a---1",
		"a--1x", "a--1--2", "a--x", "x--12345", "a-1", "a--1-", ".", "a.", "0", "a/b", "a--01"} {
		if got, want := isLabel(s), label.MatchString(s); got != want {
			t.Errorf("isLabel(%q) = %v, pattern says %v", s, got, want)
		}
		if got, want := isContinuation(s), continuation.MatchString(s); got != want {
			t.Errorf("isContinuation(%q) = %v, pattern says %v", s, got, want)
		}
	}
}
