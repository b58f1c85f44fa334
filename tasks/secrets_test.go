package tasks

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
)

// laterEnv is the next task of the Dag run: another process with a fresh
// masker and log, working on the sandboxes of e.
func laterEnv(t *testing.T, e *env) *env {
	later := newEnv(t)
	later.af.conns, later.af.vars = e.af.conns, e.af.vars
	later.drv, later.deps.Backends = e.drv, e.drv.opener(nil)
	return later
}

// Issue 10, hole 2: after a rotation, run re-read the new value to mask
// output, while the sandbox still held the old one, which then appeared in
// the log and XCom whole. Provision now records a keyed fingerprint of what
// it put in the sandbox, and run refuses before running anything when the
// value it can read is not that one.
func TestRunRefusesAfterASecretRotation(t *testing.T) {
	e := newEnv(t)
	const old, rotated = "tok-old-9f8e7d6c5b4a", "tok-new-0a1b2c3d4e5f"
	e.af.conns["api"] = connections.Connection{ConnID: "api", Password: old}
	id, err := Provision(context.Background(), e.deps, decodeInput[ProvisionInput](t, `{"env_from": {"API_TOKEN": {"connection": "api"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	tags, _ := e.drv.Tags(context.Background(), id)
	if fp := tags[TagEnvFromFingerprint]; fp == "" || strings.Contains(fp, old) {
		t.Fatalf("%s tag = %q: want a fingerprint, never the value", TagEnvFromFingerprint, fp)
	}

	e.af.conns["api"] = connections.Connection{ConnID: "api", Password: rotated}
	later := laterEnv(t, e)
	marker := e.drv.host(id, "/workspace/ran")
	res, err := RunCommands(context.Background(), later.deps, RunInput{Sandbox: SandboxRef{ID: id},
		Command: Commands{`touch ran; echo "token is $API_TOKEN"`}})
	if err == nil || !strings.Contains(err.Error(), "env_from.API_TOKEN") || !strings.Contains(err.Error(), `connection "api"`) ||
		!strings.Contains(err.Error(), "rotated") {
		t.Fatalf("want a refusal naming the variable and its source, got %v (result %+v)", err, res)
	}
	if _, serr := os.Stat(marker); serr == nil {
		t.Fatal("the command ran although the sandbox's secret could not be masked")
	}
	all := later.log.String() + err.Error() + res.OutputTail
	if strings.Contains(all, old) || strings.Contains(all, rotated) {
		t.Fatalf("a secret value leaked:\n%s", all)
	}

	// Rotated back, the sandbox's value is masked again and run proceeds.
	e.af.conns["api"] = connections.Connection{ConnID: "api", Password: old}
	res, err = RunCommands(context.Background(), later.deps, RunInput{Sandbox: SandboxRef{ID: id}, Command: Commands{`touch ran; echo "token is $API_TOKEN"`}})
	if err != nil || res.OutputTail != "token is ***\n" {
		t.Fatalf("after restoring the value: %+v, %v", res, err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the command did not run once the value matched: %v", err)
	}
}

// A sandbox that says it holds env_from secrets but carries no fingerprint
// (provisioned before fingerprints existed, or tags edited) is refused too:
// the task cannot know what to mask.
func TestRunRefusesASandboxWithoutFingerprints(t *testing.T) {
	e := newEnv(t)
	e.af.conns["api"] = connections.Connection{ConnID: "api", Password: "tok-9f8e7d6c5b4a"}
	id, err := Provision(context.Background(), e.deps, decodeInput[ProvisionInput](t, `{"env_from": {"API_TOKEN": {"connection": "api"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	tags, _ := e.drv.Tags(context.Background(), id)
	delete(tags, TagEnvFromFingerprint)
	e.drv.SetTags(context.Background(), id, tags)
	_, err = RunCommands(context.Background(), laterEnv(t, e).deps, RunInput{Sandbox: SandboxRef{ID: id}, Command: Commands{"true"}})
	if err == nil || !strings.Contains(err.Error(), "no readable fingerprint") {
		t.Fatalf("got %v", err)
	}
}

func TestProvisionRefusesForgedSecretTags(t *testing.T) {
	e := newEnv(t)
	for _, k := range []string{TagEnvFrom, TagEnvFromFingerprint} {
		_, err := Provision(context.Background(), e.deps, decodeInput[ProvisionInput](t, `{"tags": {"`+k+`": "{}"}}`))
		if err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("tags.%s: got %v", k, err)
		}
	}
	if len(e.drv.creates) != 0 {
		t.Fatal("a sandbox was created")
	}
}

// Issue 10, hole 3: output was masked line by line against whole secrets,
// so the inner lines of a multi-line secret (a PEM key) leaked into the log
// and the output tail.
func TestRunMasksEachLineOfAMultiLineSecret(t *testing.T) {
	e := newEnv(t)
	key := "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\nVJTUt9Us8cKjMzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvD\n-----END PRIVATE KEY-----\n"
	e.af.vars["deploy_key"] = key
	id, err := Provision(context.Background(), e.deps, decodeInput[ProvisionInput](t, `{"env_from": {"KEY": {"variable": "deploy_key"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	later := laterEnv(t, e)
	res, err := RunCommands(context.Background(), later.deps, RunInput{Sandbox: SandboxRef{ID: id},
		Command: Commands{`printf '%s' "$KEY"; printf 'again: %s' "$KEY" >&2`}})
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(key), "\n")[1:3] {
		if strings.Contains(res.OutputTail, line[:16]) || strings.Contains(later.log.String(), line[:16]) {
			t.Fatalf("a line of the key leaked:\ntail %q\nlog:\n%s", res.OutputTail, later.log.String())
		}
	}
	if strings.Count(res.OutputTail, "***") < 6 {
		t.Fatalf("want every line masked, tail %q", res.OutputTail)
	}
}

// rendered is what a terminal or the Airflow UI shows of output: no escape
// sequences, control characters or zero-width characters.
var rendered = strings.NewReplacer("\x1b[0m", "", "\r", "", "\x00", "", "\t", "", "\u200b", "")

// Issue 19, hole 4: a secret printed with one invisible byte inside it,
// or half to stdout and half to stderr, showed whole in the task log and
// in the output_tail XCom once rendered.
func TestRunMasksSecretsAsRendered(t *testing.T) {
	e := newEnv(t)
	const secret = "tok-5f3a9c1e7b"
	e.af.vars["api_token"] = secret
	id, err := Provision(context.Background(), e.deps, decodeInput[ProvisionInput](t, `{"env_from": {"TOKEN": {"variable": "api_token"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	later := laterEnv(t, e)
	// The two halves, then each trick between them; last, the halves on
	// stdout and stderr with no newline in between.
	cmd := `a=${TOKEN%????????}; b=${TOKEN#??????}
for sep in '\r' '\033[0m' '\000' '\t' '\342\200\213'; do printf "x %s$sep%s y\n" "$a" "$b"; done
printf '%s' "$a"; printf '%s' "$b" >&2`
	res, err := RunCommands(context.Background(), later.deps, RunInput{Sandbox: SandboxRef{ID: id}, Command: Commands{cmd}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%v, exit %d, tail %q", err, res.ExitCode, res.OutputTail)
	}
	log := later.log.String()
	if strings.Count(log, "x *** y") < 5 {
		t.Fatalf("the printed lines are not in the log as masked, so the check below proves nothing:\n%s", log)
	}
	for name, text := range map[string]string{"the task log": log, "output_tail": res.OutputTail} {
		if strings.Contains(rendered.Replace(text), secret) {
			t.Errorf("%s shows the secret once rendered:\n%q", name, text)
		}
	}
	if !strings.Contains(res.OutputTail, "tok-5f\n3a9c1e7b") && !strings.Contains(res.OutputTail, "3a9c1e7b\ntok-5f") {
		t.Errorf("the halves on stdout and stderr should end up on lines of their own in output_tail: %q", res.OutputTail)
	}
}
