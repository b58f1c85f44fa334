package pyenv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"
)

// Command runs python/<script> (a path under the repo's python/ directory)
// with the venv's interpreter, in the test's environment plus env.
func Command(ctx context.Context, tb testing.TB, env map[string]string, script string, args ...string) *exec.Cmd {
	tb.Helper()
	root, err := RepoRoot()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, Python(tb), append([]string{filepath.Join(root, "python", script)}, args...)...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return cmd
}

// RunJSON runs python/<script> to completion (for as long as it takes, up
// to near the test binary's deadline: a script that imports Airflow's
// provider took over two minutes on a 2-core machine at load 13) and
// decodes the last line it printed on stdout, a JSON value, into out. The
// test fails, with the script's stderr, if it fails or prints no JSON.
func RunJSON(tb testing.TB, env map[string]string, out any, script string, args ...string) {
	tb.Helper()
	cmd := Command(deadline.Context(tb), tb, env, script, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		tb.Fatalf("python/%s %v: %v\nstderr:\n%s", script, args, err, stderr.String())
	}
	var last []byte
	sc := bufio.NewScanner(bytes.NewReader(stdout.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) > 0 {
			last = append(last[:0], sc.Bytes()...)
		}
	}
	if err := json.Unmarshal(last, out); err != nil {
		tb.Fatalf("python/%s %v printed %q, not JSON on its last line: %v\nstderr:\n%s", script, args, stdout.String(), err, stderr.String())
	}
}
