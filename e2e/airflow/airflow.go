package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// coordinatorQueue is the queue the stub Dags put their tasks on.
const coordinatorQueue = "golang"

// wantAirflow is the Airflow the driver is meant to run under: the version
// python/requirements.lock pins.
const wantAirflow = "3.3."

// deployment is a running Airflow: its components and a REST client.
type deployment struct {
	procs []*proc
	api   *apiClient
}

// startAirflow migrates a fresh SQLite database and starts the scheduler
// (LocalExecutor: it forks the task supervisors, which fork our bundles),
// the dag-processor and the api-server (REST and Execution API), each
// bounded in how long it may take to come up. The returned deployment is
// non-nil as soon as anything was started, so the caller can stop it.
func startAirflow(ctx context.Context, o options, w *workdir, s *store, m *modalServer, l *llmServer) (*deployment, error) {
	airflowBin := filepath.Join(o.venv, "bin", "airflow")
	if _, err := os.Stat(airflowBin); err != nil {
		return nil, fmt.Errorf("%s is missing (%v): create the venv with scripts/ensure-venv.sh", airflowBin, err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logPort, err := freePort() // the scheduler's log server; 8793 may be taken
	if err != nil {
		return nil, err
	}
	user, password := "e2e", randomHex(16)
	passwords := filepath.Join(w.home, "simple_auth_manager_passwords.json")
	pw, _ := json.Marshal(map[string]string{user: password})
	if err := os.WriteFile(passwords, pw, 0o600); err != nil {
		return nil, err
	}
	base := "http://127.0.0.1:" + port
	env := append(airflowEnv(o, w, base, port, logPort, user, passwords), m.env()...)

	vctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	version := exec.CommandContext(vctx, airflowBin, "version")
	version.Env = env
	out, err := version.Output()
	if err != nil {
		return nil, fmt.Errorf("%s version failed (%v): the venv's Airflow does not start; recreate it (rm -rf %s; scripts/ensure-venv.sh)", airflowBin, err, o.venv)
	}
	got := strings.TrimSpace(string(out))
	if !strings.HasPrefix(got, wantAirflow) {
		return nil, fmt.Errorf("%s is Airflow %s, not %sx as python/requirements.lock pins; recreate the venv", airflowBin, got, wantAirflow)
	}
	info("Airflow %s, LocalExecutor, SQLite, AIRFLOW_HOME=%s", got, w.home)
	info("[sdk] coordinators: ExecutableCoordinator, executables_root %s; queue %q -> it", w.executables, coordinatorQueue)

	step("migrating the Airflow database (at most %s)", o.bootWait)
	if err := runBounded(ctx, o.bootWait, "airflow db migrate", filepath.Join(w.logs, "db-migrate.log"), env, airflowBin, "db", "migrate"); err != nil {
		return nil, err
	}

	step("starting scheduler, dag-processor and api-server (%s)", base)
	d := &deployment{}
	for _, c := range []string{"scheduler", "dag-processor", "api-server"} {
		cenv := env
		if c == "api-server" {
			// A bundle's GetConnection is relayed to the Execution API, so
			// the api-server's secrets backends answer it, never the
			// worker's environment: the connections are given to the
			// api-server only, which proves it is where one must be set.
			cenv = append(append([]string(nil), env...),
				"AIRFLOW_CONN_AWS_DEFAULT="+s.connection(), "AIRFLOW_CONN_MODAL_DEFAULT="+m.connection(),
				"AIRFLOW_CONN_LLM_DEFAULT="+l.connection())
		}
		p, err := startProc(c, filepath.Join(w.logs, c+".log"), cenv, airflowBin, c)
		if err != nil {
			return d, err
		}
		d.procs = append(d.procs, p)
		info("%s: pid %d, log %s", c, p.cmd.Process.Pid, p.log)
	}
	d.api = newAPIClient(base, user, password)
	if err := d.api.waitHealthy(ctx, o.bootWait, d.checkAlive); err != nil {
		return d, err
	}
	return d, nil
}

// airflowEnv is the environment of every Airflow process: the caller's,
// minus any Airflow settings it had (a user's AIRFLOW_HOME or connections
// must not leak into the test deployment), plus ours. The forked bundles
// inherit it through the scheduler; the api-server gets the connections.
// A caller's Modal settings go too: the tasks must reach the fake only.
func airflowEnv(o options, w *workdir, base, port, logPort, user, passwords string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "AIRFLOW") || strings.HasPrefix(kv, "MODAL_") || strings.HasPrefix(kv, "XDG_STATE_HOME=") || strings.HasPrefix(kv, "PATH=") {
			continue
		}
		env = append(env, kv)
	}
	coordinators, _ := json.Marshal(map[string]any{"go": map[string]any{
		"classpath": "airflow.sdk.coordinators.executable.ExecutableCoordinator",
		"kwargs":    map[string]any{"executables_root": []string{w.executables}},
	}})
	queues, _ := json.Marshal(map[string]string{coordinatorQueue: "go"})
	set := map[string]string{
		"PATH":                                              filepath.Join(o.venv, "bin") + string(os.PathListSeparator) + os.Getenv("PATH"),
		"AIRFLOW_HOME":                                      w.home,
		"AIRFLOW__CORE__DAGS_FOLDER":                        w.dags,
		"AIRFLOW__CORE__LOAD_EXAMPLES":                      "False",
		"AIRFLOW__CORE__EXECUTOR":                           "LocalExecutor",
		"AIRFLOW__CORE__PARALLELISM":                        "4", // two cores: a few worker processes, not 32
		"AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION":        "False",
		"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN":               "sqlite:///" + filepath.Join(w.home, "airflow.db"),
		"AIRFLOW__CORE__AUTH_MANAGER":                       "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
		"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS":          user + ":admin",
		"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": passwords,
		"AIRFLOW__API__HOST":                                "127.0.0.1",
		"AIRFLOW__API__PORT":                                port,
		"AIRFLOW__API__BASE_URL":                            base,
		"AIRFLOW__API__WORKERS":                             "1",
		"AIRFLOW__API__SECRET_KEY":                          randomHex(16),
		"AIRFLOW__API_AUTH__JWT_SECRET":                     randomHex(32),
		"AIRFLOW__CORE__EXECUTION_API_SERVER_URL":           base + "/execution/",
		"AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL":          "5",
		// The api-server's first Execution API call (the first task's
		// PATCH .../run) took 4 s on an idle 2-core machine and 30-51 s on a
		// loaded one. With the default 5 s timeout the supervisor retried,
		// the retries found the task already running (HTTP 400), the try
		// failed before it started and the task went up_for_retry.
		"AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT":  "60",
		"AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": logPort,
		"AIRFLOW__SDK__COORDINATORS":               string(coordinators),
		"AIRFLOW__SDK__QUEUE_TO_COORDINATOR":       string(queues),
		// The directory the local backend would keep its sandboxes under
		// (the forked bundles' environment): the examples run on Modal, so
		// a sandbox found there ran on the worker itself.
		// The examples use no file:// URLs and no local image directories,
		// so AIRFLOW_GO_WORKER_FILE_ROOTS / _IMAGE_ROOTS stay unset: refused.
		"XDG_STATE_HOME": w.state,
		"NO_COLOR":       "1",
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return env
}

// checkAlive fails when an Airflow component has exited, with its log.
func (d *deployment) checkAlive() error {
	for _, p := range d.procs {
		if done, err := p.exited(); done {
			return fmt.Errorf("Airflow's %s exited (%v); the end of its log (%s):\n%s", p.name, err, p.log, p.tail(40))
		}
	}
	return nil
}

// stop stops the components, the scheduler first so it hands no more
// tasks out while the api-server is still there to hear them finish.
func (d *deployment) stop() {
	step("stopping Airflow")
	for _, p := range d.procs {
		p.stop(45 * time.Second)
		info("%s stopped", p.name)
	}
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port on 127.0.0.1: %w", err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
