package check

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// dagFactsScript reads the Dags and the coordinator settings with the
// Airflow the Dags are deployed on (its DagBag, its configuration).
//
//go:embed dagfacts.py
var dagFactsScript []byte

// PythonEnv names the variable that gives the python of Airflow's
// environment when --python does not.
const PythonEnv = "AIRFLOW_GO_WORKER_PYTHON"

// airflowFacts is what dagfacts.py writes.
type airflowFacts struct {
	AirflowVersion string            `json:"airflow_version"`
	Python         string            `json:"python"`
	Dags           []dagFacts        `json:"dags"`
	ImportErrors   map[string]string `json:"import_errors"`
	Routing        routing           `json:"routing"`
	SchemaVersions []string          `json:"schema_versions"`
	// DefaultExecutionTimeout is [core] default_task_execution_timeout
	// in seconds (nil: none), which every parsed task without its own
	// carries.
	DefaultExecutionTimeout *float64 `json:"default_execution_timeout"`
	// ConfOverridesParams is [core] dag_run_conf_overrides_params (nil:
	// not read, an older dagfacts.py; Airflow's default is true).
	ConfOverridesParams *bool `json:"conf_overrides_params"`
}

type dagFacts struct {
	DagID   string      `json:"dag_id"`
	FileLoc string      `json:"fileloc"`
	Tasks   []taskFacts `json:"tasks"`
}

type taskFacts struct {
	TaskID   string   `json:"task_id"`
	Queue    string   `json:"queue"`
	Stub     bool     `json:"stub"`
	Upstream []string `json:"upstream"` // every task upstream of it, direct or not
	// The data model (datamodel.go): the task's outlets, how it is
	// mapped (nil: not mapped) and the mapped tasks expanding over it.
	Outlets          []assetFacts `json:"outlets"`
	Expand           *expandFacts `json:"expand"`
	MappedDependants []string     `json:"mapped_dependants"`
	// Attributes are a stub's attributes Airflow applies in its Python
	// task runner, its call's arguments, params and branch shape
	// (attributes.go); nil for a task that is not a stub.
	Attributes *stubFacts `json:"attributes"`
	// AttributesError says why dagfacts.py could not read them.
	AttributesError string `json:"attributes_error"`
}

type routing struct {
	Coordinators       map[string]coordinator `json:"coordinators"`
	QueueToCoordinator map[string]string      `json:"queue_to_coordinator"`
	Error              string                 `json:"error"`
}

type coordinator struct {
	ClassPath       string   `json:"classpath"`
	Executable      bool     `json:"executable"` // an ExecutableCoordinator: the one that runs bundles
	ExecutablesRoot []string `json:"executables_root"`
	Error           string   `json:"error"`
}

// choosePython is --python, else $AIRFLOW_GO_WORKER_PYTHON, else python3
// on PATH.
func choosePython(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if p := os.Getenv(PythonEnv); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		return "", fmt.Errorf("no python3 on PATH: check parses the Dags with your Airflow's own parser, so it needs the python of the environment Airflow is installed in; give it with --python /path/to/venv/bin/python or %s", PythonEnv)
	}
	return p, nil
}

// readAirflow runs dagfacts.py with python over the Dag paths.
func readAirflow(ctx context.Context, python string, paths []string, env []string) (airflowFacts, error) {
	var f airflowFacts
	dir, err := os.MkdirTemp("", "airflow-go-worker-check-")
	if err != nil {
		return f, err
	}
	defer os.RemoveAll(dir)
	script, out := filepath.Join(dir, "dagfacts.py"), filepath.Join(dir, "facts.json")
	if err := os.WriteFile(script, dagFactsScript, 0o600); err != nil {
		return f, err
	}
	abs := make([]string, len(paths))
	for i, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return f, fmt.Errorf("--dags %s: %w", p, err)
		}
		if abs[i], err = filepath.Abs(p); err != nil {
			return f, err
		}
	}
	cmd := exec.CommandContext(ctx, python, append([]string{script, out}, abs...)...)
	cmd.Env = env
	bound(cmd)
	output := newTailWriter(maxParserOutput)
	cmd.Stdout, cmd.Stderr = output, output
	err = cmd.Run()
	if err := timedOut(ctx, "Airflow was parsing the Dags"); err != nil {
		return f, err
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitCode() == 3:
		return f, fmt.Errorf("%s cannot import Airflow (%s): check parses the Dags with your Airflow's own parser, so it needs the python of the environment Airflow is installed in; give it with --python /path/to/venv/bin/python or %s", python, lastLine(output.String()), PythonEnv)
	case err != nil && exit == nil:
		return f, fmt.Errorf("running %s: %w; give the python of Airflow's environment with --python or %s", python, err, PythonEnv)
	case err != nil:
		return f, fmt.Errorf("reading the Dags with %s failed (%v):\n%s", python, err, output.lastLines(40))
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return f, fmt.Errorf("%s wrote no facts: %w\n%s", python, err, output.lastLines(40))
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return f, fmt.Errorf("reading what %s wrote: %w", python, err)
	}
	return f, nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// tail keeps the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
