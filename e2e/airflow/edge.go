package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// `make airflow-e2e EXECUTOR=edge`: the examples on the Edge executor
// (apache-airflow-providers-edge3, pinned in python/requirements.lock), two
// edge workers as hosts of their own that reach the api-server and
// nothing else of Airflow's, then one of them killed mid-task. The settings
// below are docs/deploying.md's Edge steps; the network, the services, the
// worker hosts, the batches and the kill fault are the Celery run's
// (celery.go, netns.go, worker.go, faults.go). The broker and bundle faults
// are not struck again: with no broker there is none to lose, and a
// missing bundle fails in the task supervisor, which is the same on both.

const (
	edgeWorkers = 2
	// edgeHeartbeat is [edge] heartbeat_interval (30 s by default). The
	// scheduler marks a worker that has not heartbeated for five of them
	// unknown, and only then does the Edge API let a worker of that name
	// register again: shortened so the killed worker's restart comes soon.
	edgeHeartbeat = 10
)

func runEdge(ctx context.Context, o options) error { return runDistributed(ctx, o, edgeFlavor{}) }

// edgeFlavor: two edge workers pulling jobs from the api-server over HTTP;
// the scheduler's EdgeExecutor queues them in the metadata database.
type edgeFlavor struct{}

func (edgeFlavor) name() string { return "Edge" }
func (edgeFlavor) workers() int { return edgeWorkers }
func (edgeFlavor) broker() bool { return false }

// settings: docs/deploying.md, "EdgeExecutor, step by step", 2 and 3.
func (edgeFlavor) settings(c *celeryRun) map[string]string {
	return map[string]string{
		"AIRFLOW__CORE__EXECUTOR":             "airflow.providers.edge3.executors.EdgeExecutor",
		"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": c.pg.url("postgresql+psycopg2"),
		"AIRFLOW__EDGE__API_ENABLED":          "True",
		"AIRFLOW__EDGE__HEARTBEAT_INTERVAL":   fmt.Sprint(edgeHeartbeat),
	}
}

// offWorkers: an edge worker reaches no database and serves no logs (it
// pushes them), so it runs without the database URL and [api] secret_key;
// the Edge API is the api-server's to serve. It keeps [api_auth]
// jwt_secret: it signs its own requests to the Edge API with it.
func (edgeFlavor) offWorkers() []string {
	return []string{"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE",
		"AIRFLOW__API__SECRET_KEY", "AIRFLOW__EDGE__API_ENABLED"}
}

// setUp: `airflow edge worker` with the deployment's queues, named after
// its host, ready once the Edge API lists it idle; a restart after a kill
// goes through edgeRestart.
func (edgeFlavor) setUp(c *celeryRun, cw *hostWorker) map[string]string {
	cw.command = []string{c.a.bin, "edge", "worker", "--queues", celeryWorkerQueues, "--edge-hostname", cw.host,
		"--concurrency", fmt.Sprint(workerConcurrency)}
	cw.ready = func() (bool, string, error) {
		st, err := c.edgeWorkerState(context.Background(), cw.host)
		if err != nil {
			return false, err.Error(), nil
		}
		return st == "idle" || st == "running", "the Edge API lists it as " + quoteState(st), nil
	}
	cw.beforeRestart = func(ctx context.Context) error { return c.edgeRestart(ctx, cw) }
	return map[string]string{
		"AIRFLOW__EDGE__API_URL":           c.a.base + "/edge_worker/v1/rpcapi",
		"AIRFLOW__EDGE__JOB_POLL_INTERVAL": "1",
	}
}

// logSource: an edge worker pushes its task logs to the api-server, which
// writes them into its own [logging] base_log_folder and serves them from
// there.
func (edgeFlavor) logSource(c *celeryRun, _ string) string {
	return filepath.Join(c.w.home, "logs") + "/"
}

func (edgeFlavor) faults(c *celeryRun) []func(context.Context) error {
	return []func(context.Context) error{c.faultKill}
}

func (edgeFlavor) cleanRuns(o options) int { return o.edgeRuns }

func quoteState(st string) string {
	if st == "" {
		return "nothing (not registered)"
	}
	return st
}

// edgeWorkerState is the state the Edge API's UI endpoint gives the worker
// named host ("" when it lists none of that name).
func (c *celeryRun) edgeWorkerState(ctx context.Context, host string) (string, error) {
	var res struct {
		Workers []struct {
			Name  string `json:"worker_name"`
			State string `json:"state"`
		} `json:"workers"`
	}
	if err := c.api.do(ctx, "GET", "/edge_worker/ui/worker?worker_name_pattern="+url.QueryEscape(host), nil, &res, ""); err != nil {
		return "", err
	}
	for _, w := range res.Workers {
		if w.Name == host {
			return w.State, nil
		}
	}
	return "", nil
}

// edgeRestart is what an operator meets restarting a killed edge host at
// once, and what to do (docs/deploying.md). While the scheduler still
// counts the dead worker as active, the Edge API refuses a worker of the
// same name (HTTP 409) and `airflow edge worker` exits; the scheduler marks
// it unknown after 5 x [edge] heartbeat_interval with no heartbeat. Then
// the PID file the killed worker left in AIRFLOW_HOME names the new
// worker's own PID (a PID namespace or container starts it with the same
// one), and the worker exits again, but only after registering, so the
// name counts as active once more: the file must go before the start.
func (c *celeryRun) edgeRestart(ctx context.Context, cw *hostWorker) error {
	if err := c.restartRefused(ctx, cw, "already active", "the Edge API refused its name while the killed worker counted as active"); err != nil {
		return err
	}
	pidFile := filepath.Join(cw.home, "airflow-edge-worker.pid")
	_, err := os.Stat(pidFile)
	c.expect(err == nil, "the killed %s left its PID file, %s%s", cw.host, pidFile, errText(err))
	if err != nil {
		return nil
	}
	step("starting %s again, now that it is unknown, with the killed worker's PID file in place", cw.host)
	c.expectExit(ctx, cw, "A PID file has already been written", "the PID file names the new worker's own PID (1 in its PID namespace)")
	info("removing %s, as docs/deploying.md says", pidFile)
	if err := os.Remove(pidFile); err != nil {
		return err
	}
	st, err := c.edgeWorkerState(ctx, cw.host)
	if err != nil {
		return err
	}
	c.expect(st != "unknown" && st != "offline", "the worker that exited for its PID file had registered first: the Edge API lists %s as %s", cw.host, quoteState(st))
	return c.waitUnknown(ctx, cw)
}

// restartRefused starts cw while the Edge API lists its name active and
// expects it to exit, saying says; then waits for the scheduler to mark
// the name unknown.
func (c *celeryRun) restartRefused(ctx context.Context, cw *hostWorker, says, why string) error {
	st, err := c.edgeWorkerState(ctx, cw.host)
	if err != nil {
		return err
	}
	if st != "unknown" && st != "offline" {
		step("starting %s again at once, while the Edge API still lists it as %s", cw.host, st)
		c.expectExit(ctx, cw, says, why)
	} else {
		info("the scheduler had already marked %s %s", cw.host, st)
	}
	return c.waitUnknown(ctx, cw)
}

// waitUnknown waits until the Edge API lists cw's name as unknown.
func (c *celeryRun) waitUnknown(ctx context.Context, cw *hostWorker) error {
	step("waiting for the scheduler to mark %s unknown (no heartbeat for 5 x [edge] heartbeat_interval = %d s)", cw.host, 5*edgeHeartbeat)
	start := time.Now()
	err := poll(ctx, 5*time.Minute, time.Second, "the scheduler to mark "+cw.host+" unknown", c.alive, func() (bool, string, error) {
		st, err := c.edgeWorkerState(ctx, cw.host)
		if err != nil {
			return false, err.Error(), nil
		}
		return st == "unknown", "the Edge API lists it as " + quoteState(st), nil
	})
	if err == nil {
		info("%s is unknown after %s", cw.host, time.Since(start).Round(time.Second))
	}
	return err
}

// expectExit starts cw and expects it to exit on its own with says in its
// log, for the reason why.
func (c *celeryRun) expectExit(ctx context.Context, cw *hostWorker, says, why string) {
	log, err := cw.runToExit(ctx, 3*time.Minute)
	c.expect(err == nil && strings.Contains(log, says), "the restarted %s exited: %s (its log says %q)%s", cw.host, why, says, errText(err))
}
