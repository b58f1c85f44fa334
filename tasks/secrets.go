package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// TagEnvFrom records, on the sandbox, where its env_from variables come from
// (connection ids, fields, variable keys; never values). Later tasks read it
// to re-register the values with Airflow's masker and to redact them from
// command output before it reaches their log or XCom: a command that prints
// its environment must not leak what provision put there.
const TagEnvFrom = "airflow_env_from"

// envFromTag encodes sources for TagEnvFrom; "" when there are none.
func envFromTag(src map[string]EnvSource) string {
	if len(src) == 0 {
		return ""
	}
	b, err := json.Marshal(src) // map keys come out sorted
	if err != nil {
		return ""
	}
	return string(b)
}

// redactor replaces secret values with ***.
type redactor struct {
	r      *strings.Replacer
	maxLen int // length of the longest secret
}

func newRedactor(secrets []string) *redactor {
	// Longest first, so a secret containing another is replaced whole.
	vals := make([]string, 0, len(secrets))
	for _, s := range secrets {
		if len(s) >= 3 { // masking "a" or "no" would garble all output
			vals = append(vals, s)
		}
	}
	sort.Slice(vals, func(i, j int) bool { return len(vals[i]) > len(vals[j]) })
	var pairs []string
	for _, v := range vals {
		pairs = append(pairs, v, "***")
	}
	r := &redactor{r: strings.NewReplacer(pairs...)}
	if len(vals) > 0 {
		r.maxLen = len(vals[0])
	}
	return r
}

// overlap is how many trailing bytes of a redacted piece of output could
// still be the start of a secret that the next piece completes.
func (r *redactor) overlap() int {
	if r == nil || r.maxLen == 0 {
		return 0
	}
	return r.maxLen - 1
}

func (r *redactor) redact(s string) string {
	if r == nil || r.r == nil {
		return s
	}
	return r.r.Replace(s)
}

// sandboxSecrets re-resolves the env_from values recorded on a sandbox,
// registers them with the masker of this task and returns them. A source
// that can no longer be read is an error: its value is still in the
// sandbox's environment, and without it this task could not keep it out of
// the command output it logs and returns.
func sandboxSecrets(ctx context.Context, d Deps, tags map[string]string) ([]string, error) {
	raw := tags[TagEnvFrom]
	if raw == "" {
		return nil, nil
	}
	const refuse = "refusing to run commands whose output could show a secret this task cannot redact"
	var src map[string]EnvSource
	if err := json.Unmarshal([]byte(raw), &src); err != nil {
		return nil, fmt.Errorf("the sandbox's %s tag, which says where its env_from secrets come from, is unreadable (%v); %s. Provision a new sandbox", TagEnvFrom, err, refuse)
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(src)) {
		v, err := resolveEnvSource(ctx, d, name, src[name])
		if err != nil {
			return nil, fmt.Errorf("re-reading a secret the sandbox holds, to redact it: %w; %s. Restore the source, or provision a new sandbox", err, refuse)
		}
		if err := d.Airflow.MaskSecret(ctx, v, name); err != nil {
			d.logger().Warn("registering a sandbox secret with the masker failed; it is still redacted from output", "variable", name, "error", err)
		}
		out = append(out, v)
	}
	return out, nil
}

func withTag(tags map[string]string, k, v string) map[string]string {
	out := maps.Clone(tags)
	if out == nil {
		out = map[string]string{}
	}
	out[k] = v
	return out
}
