package tasks

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
	"github.com/airflow-sandbox/airflow-go-worker/redact"
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

// newRedactor is the mask set for a command's output: the secrets the
// sandbox holds, each line of a multi-line one included.
func newRedactor(secrets []string) *redact.Set { return redact.New(secrets...) }

// TagEnvFromFingerprint records a keyed fingerprint of each env_from value
// as provision put it in the sandbox, never the value:
// {"key": "<hex>", "values": {"NAME": "<hex HMAC-SHA256(key, NAME, value)>"}}.
// A later task re-reads each source and compares: if a secret was rotated
// meanwhile, the sandbox still holds the old value, which the new one cannot
// mask, so the task refuses to run rather than leak it.
//
// The key is random per sandbox and kept beside the fingerprints. It is not
// hidden from whoever reads the tags, and need not be: the backend
// credentials that read tags also exec in the sandbox, where the values are
// in plain text. What it buys is that a fingerprint matches nothing outside
// its sandbox (the same secret fingerprints differently in each one).
const TagEnvFromFingerprint = "airflow_env_from_fp"

type envFingerprints struct {
	Key    string            `json:"key"`
	Values map[string]string `json:"values"`
}

func newEnvFingerprints() envFingerprints {
	var k [16]byte
	if _, err := rand.Read(k[:]); err != nil {
		panic("tasks: crypto/rand failed: " + err.Error()) // never happens on Linux
	}
	return envFingerprints{Key: hex.EncodeToString(k[:]), Values: map[string]string{}}
}

// fingerprint is HMAC-SHA256 over the variable name and the value, cut to
// 128 bits (it only has to tell two values apart).
func (f envFingerprints) fingerprint(name, value string) (string, error) {
	key, err := hex.DecodeString(f.Key)
	if err != nil || len(key) < 16 {
		return "", fmt.Errorf("the fingerprint key is not 32 hex digits")
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(name))
	m.Write([]byte{0})
	m.Write([]byte(value))
	return hex.EncodeToString(m.Sum(nil)[:16]), nil
}

func (f envFingerprints) add(name, value string) {
	fp, err := f.fingerprint(name, value)
	if err != nil {
		panic("tasks: " + err.Error()) // our own fresh key
	}
	f.Values[name] = fp
}

func (f envFingerprints) tag() string {
	b, _ := json.Marshal(f) // strings only: cannot fail
	return string(b)
}

// sandboxSecrets re-resolves the env_from values recorded on a sandbox,
// checks each against the fingerprint provision recorded, registers them
// with the masker of this task and returns them. A source that can no
// longer be read, or whose value changed since provision (a rotation), is an
// error: the sandbox's environment still holds the value provision put
// there, and this task could not keep it out of the command output it logs
// and returns.
func sandboxSecrets(ctx context.Context, d Deps, sandboxID string, tags map[string]string) ([]string, error) {
	raw := tags[TagEnvFrom]
	if raw == "" {
		return nil, nil
	}
	const refuse = "refusing to run commands whose output could show a secret this task cannot redact"
	var src map[string]EnvSource
	if err := json.Unmarshal([]byte(raw), &src); err != nil {
		return nil, final.Errorf("the sandbox's %s tag, which says where its env_from secrets come from, is unreadable (%v); %s. Provision a new sandbox", TagEnvFrom, err, refuse)
	}
	var fps envFingerprints
	if err := json.Unmarshal([]byte(tags[TagEnvFromFingerprint]), &fps); err != nil || fps.Values == nil {
		return nil, final.Errorf("sandbox %s holds env_from secrets but no readable fingerprint of them (%s tag; a sandbox provisioned by an older airflow-go-worker has none), so this task cannot tell whether the values it can read are the ones the sandbox holds; %s. Destroy it and provision a new sandbox", sandboxID, TagEnvFromFingerprint, refuse)
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(src)) {
		v, err := resolveEnvSource(ctx, d, name, src[name])
		if err != nil {
			return nil, fmt.Errorf("re-reading a secret the sandbox holds, to redact it: %w; %s. Restore the source, or provision a new sandbox", err, refuse)
		}
		want, ok := fps.Values[name]
		got, err := fps.fingerprint(name, v)
		if err != nil || !ok || !hmac.Equal([]byte(got), []byte(want)) {
			return nil, final.Errorf("env_from.%s: the value of %s is not the one sandbox %s was provisioned with (was it rotated since?); the sandbox still holds the old value, which this task cannot mask, so it is %s. Destroy the sandbox and provision a new one, or restore the old value", name, src[name].describe(), sandboxID, refuse)
		}
		if err := d.Airflow.MaskSecret(ctx, v, name); err != nil {
			d.logger().Warn("registering a sandbox secret with the masker failed; it is still redacted from output", "variable", name, "error", err)
		}
		out = append(out, v)
	}
	return out, nil
}

// describe names a source for error messages (never its value).
func (s EnvSource) describe() string {
	if s.Variable != "" {
		return fmt.Sprintf("Airflow variable %q", s.Variable)
	}
	field := s.Field
	if field == "" {
		field = "password"
	}
	return fmt.Sprintf("field %s of connection %q", field, s.Connection)
}

func withTag(tags map[string]string, k, v string) map[string]string {
	out := maps.Clone(tags)
	if out == nil {
		out = map[string]string{}
	}
	out[k] = v
	return out
}
