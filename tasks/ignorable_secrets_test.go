package tasks

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// Issue 29, item 3: a secret printed with a variation selector, a tag
// character, U+061C, U+3164, U+17B4, U+1D173, U+FFF9 or an NBSP between
// its halves showed whole in the task log and in output_tail.
func TestRunMasksSecretsThroughEveryIgnorable(t *testing.T) {
	e := newEnv(t)
	const secret = "tok-5f3a9c1e7b"
	e.af.vars["api_token"] = secret
	id, err := Provision(context.Background(), e.deps, decodeInput[ProvisionInput](t, `{"env_from": {"TOKEN": {"variable": "api_token"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	later := laterEnv(t, e)
	seps := []rune{0xfe00, 0xfe0f, 0xe0100, 0xe01ef, 0xe0000, 0xe007f, 0x061c, 0x3164, 0x17b4, 0x1d173, 0xfff9, 0xa0}
	var cmd strings.Builder
	cmd.WriteString("a=${TOKEN%????????}; b=${TOKEN#??????}\n")
	for _, r := range seps {
		var octal strings.Builder
		for _, c := range []byte(string(r)) {
			fmt.Fprintf(&octal, "\\%03o", c)
		}
		fmt.Fprintf(&cmd, "printf 'x %%s%s%%s y\\n' \"$a\" \"$b\"\n", octal.String())
	}
	res, err := RunCommands(context.Background(), later.deps, RunInput{Sandbox: SandboxRef{ID: id}, Command: Commands{cmd.String()}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%v, exit %d, tail %q", err, res.ExitCode, res.OutputTail)
	}
	log := later.log.String()
	if n := strings.Count(log, "x *** y"); n != len(seps) {
		t.Fatalf("%d of the %d printed lines are in the log masked:\n%s", n, len(seps), log)
	}
	for name, text := range map[string]string{"the task log": log, "output_tail": res.OutputTail} {
		seen := text // a viewer draws each separator as nothing (NBSP as a gap)
		for _, r := range seps {
			seen = strings.ReplaceAll(seen, string(r), "")
		}
		if strings.Contains(seen, secret) {
			t.Errorf("%s shows the secret once rendered:\n%q", name, text)
		}
	}
}
