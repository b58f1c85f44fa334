package sandbox

import (
	"os/exec"
	"testing"
)

// The portable wrapper's scripts are valid POSIX shell (dash, the strictest
// sh here, parses them), and a poll's output reads back.
func TestDetachedScriptsParse(t *testing.T) {
	for name, script := range map[string]string{
		"background": backgroundWrapper("/tmp/.airflow-go-worker/ab'c"), "foreground": foregroundWrapper("/tmp/x"),
		"poll": pollScript("/tmp/x", Offsets{Stdout: 3, Stderr: 4}, 10),
	} {
		if out, err := exec.Command("sh", "-n", "-c", script).CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s\n%s", name, err, out, script)
		}
	}
	st, err := parsePoll("sb", "id", []byte("exit 3\nabc"), []byte("de"), Offsets{Stdout: 10, Stderr: 1})
	if err != nil || st.Running || st.ExitCode != 3 || st.Next != (Offsets{Stdout: 13, Stderr: 3}) || string(st.Stdout) != "abc" {
		t.Fatalf("parsed %+v, %v", st, err)
	}
	if _, err := parsePoll("sb", "id", []byte("gone\n"), nil, Offsets{}); err == nil {
		t.Fatal("a command whose files are gone parsed as a status")
	}
	if validDetachedID("../etc") || !validDetachedID("0af3") {
		t.Fatal("validDetachedID")
	}
}
