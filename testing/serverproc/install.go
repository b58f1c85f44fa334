package serverproc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

var installMu sync.Mutex

// GoBinary finds the command name on PATH or in $(go env GOPATH)/bin and
// installs it with `go install module` (module@version) when it is in
// neither. scripts/ensure-tools.sh installs the same versions up front.
func GoBinary(name, module string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	gobin, err := goBinDir()
	if err != nil {
		return "", fmt.Errorf("%s is not on PATH and %v; install it with `go install %s`", name, err, module)
	}
	p := filepath.Join(gobin, name)
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	installMu.Lock()
	defer installMu.Unlock()
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	out, err := exec.Command("go", "install", module).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s is not installed and `go install %s` failed: %v\n%s\ninstall it by hand with that command", name, module, err, out)
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("`go install %s` succeeded but %s is missing: %v", module, p, err)
	}
	return p, nil
}

func goBinDir() (string, error) {
	out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output()
	if err != nil {
		return "", fmt.Errorf("`go env` failed (%v)", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > 0 && strings.TrimSpace(lines[0]) != "" {
		return strings.TrimSpace(lines[0]), nil
	}
	if len(lines) < 2 || strings.TrimSpace(lines[1]) == "" {
		return "", errors.New("GOPATH is empty")
	}
	// GOPATH may list several directories; go install uses the first.
	return filepath.Join(filepath.SplitList(strings.TrimSpace(lines[1]))[0], "bin"), nil
}

// NpmBinary finds the command name on PATH and installs the npm package pkg
// (name@version) globally when it is missing.
func NpmBinary(name, pkg string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	installMu.Lock()
	defer installMu.Unlock()
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	if _, err := exec.LookPath("npm"); err != nil {
		return "", fmt.Errorf("%s is not installed and npm is missing to install it; install Node.js and npm (apt-get install nodejs npm), then `npm install -g %s`", name, pkg)
	}
	out, err := exec.Command("npm", "install", "-g", "--no-fund", "--no-audit", pkg).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s is not installed and `npm install -g %s` failed: %v\n%s\ninstall it by hand with that command", name, pkg, err, out)
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("`npm install -g %s` succeeded but %s is not on PATH (npm's global bin directory: `npm prefix -g`/bin)", pkg, name)
	}
	return p, nil
}
