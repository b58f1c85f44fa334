package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
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
	env   []string // the scheduler's and dag-processor's environment
}

// startAirflow migrates a fresh SQLite database and starts the scheduler
// (LocalExecutor: it forks the task supervisors, which fork our bundles),
// the dag-processor and the api-server (REST and Execution API), each
// bounded in how long it may take to come up. The returned deployment is
// non-nil as soon as anything was started, so the caller can stop it.
func startAirflow(ctx context.Context, o options, w *workdir, s *store, m *modalServer, l *llmServer) (*deployment, error) {
	a, err := prepareAirflow(ctx, o, w, "127.0.0.1")
	if err != nil {
		return nil, err
	}
	info("Airflow %s, LocalExecutor, SQLite, AIRFLOW_HOME=%s", a.version, w.home)
	info("[sdk] coordinators: ExecutableCoordinator, executables_root %s; queue %q -> it", w.executables, coordinatorQueue)
	env := append(append([]string(nil), a.env...), m.env()...)
	apiEnv := append(append(append([]string(nil), env...), apiConnections(s, m)...), "AIRFLOW_CONN_LLM_DEFAULT="+l.connection())
	return a.boot(ctx, o, w, env, apiEnv)
}

// airflowSetup is what the components of one deployment share: the venv's
// airflow, its version, their settings (airflowEnv) and the REST login.
type airflowSetup struct {
	bin, version   string
	env            []string
	base           string // the api-server's URL
	user, password string
}

// prepareAirflow checks the venv's Airflow and settles the settings of a
// deployment whose api-server listens on host.
func prepareAirflow(ctx context.Context, o options, w *workdir, host string) (*airflowSetup, error) {
	a := &airflowSetup{bin: filepath.Join(o.venv, "bin", "airflow"), user: "e2e", password: randomHex(16)}
	if _, err := os.Stat(a.bin); err != nil {
		return nil, fmt.Errorf("%s is missing (%v): create the venv with scripts/ensure-venv.sh", a.bin, err)
	}
	port, err := freePortOn(host)
	if err != nil {
		return nil, err
	}
	logPort, err := freePortOn(host) // the log server's; 8793 may be taken
	if err != nil {
		return nil, err
	}
	passwords := filepath.Join(w.home, "simple_auth_manager_passwords.json")
	pw, _ := json.Marshal(map[string]string{a.user: a.password})
	if err := os.WriteFile(passwords, pw, 0o600); err != nil {
		return nil, err
	}
	a.base = "http://" + net.JoinHostPort(host, port)
	a.env = airflowEnv(o, w, host, a.base, port, logPort, a.user, passwords)

	vctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	version := exec.CommandContext(vctx, a.bin, "version")
	version.Env = a.env
	out, err := version.Output()
	if err != nil {
		return nil, fmt.Errorf("%s version failed (%v): the venv's Airflow does not start; recreate it (rm -rf %s; scripts/ensure-venv.sh)", a.bin, err, o.venv)
	}
	a.version = strings.TrimSpace(string(out))
	if !strings.HasPrefix(a.version, wantAirflow) {
		return nil, fmt.Errorf("%s is Airflow %s, not %sx as python/requirements.lock pins; recreate the venv", a.bin, a.version, wantAirflow)
	}
	return a, nil
}

// apiConnections are the connections the examples use, as the api-server
// reads them. A bundle's GetConnection is relayed to the Execution API, so
// the api-server's secrets backends answer it, never the worker's
// environment: the connections are given to the api-server only, which
// proves it is where one must be set.
func apiConnections(s *store, m *modalServer) []string {
	return []string{"AIRFLOW_CONN_AWS_DEFAULT=" + s.connection(), "AIRFLOW_CONN_MODAL_DEFAULT=" + m.connection()}
}

// boot migrates the database and starts the scheduler, the dag-processor
// (both with env) and the api-server (with apiEnv), then waits until they
// report healthy and logs in.
func (a *airflowSetup) boot(ctx context.Context, o options, w *workdir, env, apiEnv []string) (*deployment, error) {
	step("migrating the Airflow database (at most %s)", o.bootWait)
	if err := runBounded(ctx, o.bootWait, "airflow db migrate", filepath.Join(w.logs, "db-migrate.log"), env, a.bin, "db", "migrate"); err != nil {
		return nil, err
	}

	step("starting scheduler, dag-processor and api-server (%s)", a.base)
	d := &deployment{env: env}
	for _, c := range []string{"scheduler", "dag-processor", "api-server"} {
		cenv := env
		if c == "api-server" {
			cenv = apiEnv
		}
		p, err := startProc(c, filepath.Join(w.logs, c+".log"), cenv, a.bin, c)
		if err != nil {
			return d, err
		}
		d.procs = append(d.procs, p)
		info("%s: pid %d, log %s", c, p.cmd.Process.Pid, p.log)
	}
	d.api = newAPIClient(a.base, a.user, a.password)
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
func airflowEnv(o options, w *workdir, host, base, port, logPort, user, passwords string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "AIRFLOW") || strings.HasPrefix(kv, "MODAL_") || strings.HasPrefix(kv, "XDG_STATE_HOME=") || strings.HasPrefix(kv, "PATH=") {
			continue
		}
		env = append(env, kv)
	}
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
		"AIRFLOW__API__HOST":                                host,
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
		// The directory the local backend would keep its sandboxes under
		// (the forked bundles' environment): the examples run on Modal, so
		// a sandbox found there ran on the worker itself.
		// The examples use no file:// URLs and no local image directories,
		// so AIRFLOW_GO_WORKER_FILE_ROOTS / _IMAGE_ROOTS stay unset: refused.
		"XDG_STATE_HOME": w.state,
		"NO_COLOR":       "1",
	}
	maps.Copy(set, coordinatorSettings(w.executables))
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return env
}

// coordinatorSettings route the stub Dags' queue to an
// ExecutableCoordinator over executablesRoot ([sdk] coordinators and
// queue_to_coordinator).
func coordinatorSettings(executablesRoot string) map[string]string {
	coordinators, _ := json.Marshal(map[string]any{"go": map[string]any{
		"classpath": "airflow.sdk.coordinators.executable.ExecutableCoordinator",
		"kwargs":    map[string]any{"executables_root": []string{executablesRoot}},
	}})
	queues, _ := json.Marshal(map[string]string{coordinatorQueue: "go"})
	return map[string]string{"AIRFLOW__SDK__COORDINATORS": string(coordinators), "AIRFLOW__SDK__QUEUE_TO_COORDINATOR": string(queues)}
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

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
