// Package pyenv gives tests the Python interpreter of the project's pinned venv
// (python/requirements.lock: the real Airflow task SDK, Modal's Python client,
// the common.ai provider).
//
// `make test` creates the venv first and passes its interpreter in
// AIRFLOW_GO_WORKER_PYTHON; a bare `go test` creates it through
// scripts/ensure-venv.sh. Either way a test that needs it gets it or fails:
// it never skips.
package pyenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// EnvVar names the interpreter to use instead of creating the venv.
const EnvVar = "AIRFLOW_GO_WORKER_PYTHON"

var (
	once   sync.Once
	python string
	errPy  error
)

// Python returns the venv's interpreter, creating the venv on first use.
func Python(tb testing.TB) string {
	tb.Helper()
	once.Do(func() { python, errPy = find() })
	if errPy != nil {
		tb.Fatalf("pyenv: %v", errPy)
	}
	return python
}

func find() (string, error) {
	if p := os.Getenv(EnvVar); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %v (unset it to let the tests create the venv)", EnvVar, p, err)
		}
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(root, "scripts", "ensure-venv.sh"))
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("scripts/ensure-venv.sh: %v\n%s", err, stderr.String())
	}
	p := strings.TrimSpace(stdout.String())
	if p == "" {
		return "", fmt.Errorf("scripts/ensure-venv.sh printed no interpreter path\n%s", stderr.String())
	}
	return p, nil
}

// RepoRoot is the directory holding go.mod, found from the working directory up.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}
