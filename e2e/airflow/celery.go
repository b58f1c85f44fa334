package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// `make airflow-e2e EXECUTOR=celery`: the examples on Airflow's
// CeleryExecutor, two workers as separate hosts, then three faults. See
// docs/deploying.md: the settings below are its Celery steps, followed as
// written.
//
// The driver runs in two parts. The first, in the machine's own network
// namespace, makes the network (netns.go) and runs the second inside the
// control plane's namespace, removing the network when it is done. The
// second starts PostgreSQL, Redis, the S3 server, the fake Modal server,
// Airflow's scheduler, dag-processor and api-server there, and a Celery
// worker in each worker namespace.

const (
	celeryWorkers     = 2
	workerConcurrency = 3 // slots per worker; the fault batches count on it
	maintenanceDagID  = "airflow_go_worker_sweep"
	// heartbeatTimeout is [scheduler] task_instance_heartbeat_timeout,
	// shortened from 300 s so a killed worker's tasks are failed (and
	// retried) within the run; long enough that a loaded 2-core machine's
	// late heartbeats are not taken for a dead worker.
	heartbeatTimeout = 60
	redisOutage      = 20 * time.Second
)

// flavor is what differs between the runs whose workers are hosts of
// their own: CeleryExecutor (celeryFlavor, below) and EdgeExecutor
// (edgeFlavor, edge.go). Everything else, the network, the services, the
// worker hosts, the batches and the kill fault, they share.
type flavor interface {
	name() string // "Celery", "Edge": for messages
	workers() int
	broker() bool // whether the run starts Redis
	// settings are what the deployment changes in every component's
	// settings; offWorkers the control plane's a worker runs without.
	settings(c *celeryRun) map[string]string
	offWorkers() []string
	// setUp gives a worker host its command, ready line and own settings.
	setUp(c *celeryRun, cw *hostWorker) map[string]string
	// logSource is what the api-server's answer for a task log that ran on
	// host names as the log's source.
	logSource(c *celeryRun, host string) string
	faults(c *celeryRun) []func(context.Context) error
	cleanRuns(o options) int
}

func runCelery(ctx context.Context, o options) error { return runDistributed(ctx, o, celeryFlavor{}) }

// celeryFlavor: two Celery workers, Redis as the broker, three faults.
type celeryFlavor struct{}

func (celeryFlavor) name() string { return "Celery" }
func (celeryFlavor) workers() int { return celeryWorkers }
func (celeryFlavor) broker() bool { return true }

// settings: docs/deploying.md, "CeleryExecutor, step by step", 2.
func (celeryFlavor) settings(c *celeryRun) map[string]string {
	return map[string]string{
		"AIRFLOW__CORE__EXECUTOR":             "CeleryExecutor",
		"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": c.pg.url("postgresql+psycopg2"),
		"AIRFLOW__CELERY__BROKER_URL":         c.redis.url(),
		"AIRFLOW__CELERY__RESULT_BACKEND":     c.pg.url("db+postgresql+psycopg2"),
	}
}

func (celeryFlavor) offWorkers() []string {
	return []string{"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"}
}

func (celeryFlavor) setUp(c *celeryRun, cw *hostWorker) map[string]string {
	cw.command = []string{c.a.bin, "celery", "worker", "--queues", celeryWorkerQueues, "--celery-hostname", cw.host,
		"--concurrency", fmt.Sprint(workerConcurrency)}
	cw.ready = cw.logSays("celery@" + cw.host + " ready.")
	return nil
}

// logSource: the worker's log server, http://<host>:<port>/log/...
func (celeryFlavor) logSource(_ *celeryRun, host string) string { return "http://" + host + ":" }

func (celeryFlavor) faults(c *celeryRun) []func(context.Context) error {
	return []func(context.Context) error{c.faultKill, c.faultRedis, c.faultBundle}
}

func (celeryFlavor) cleanRuns(o options) int { return o.celeryRuns }

// runDistributed runs the examples with f's executor, each worker a host
// of its own: the first part makes the network and runs the second inside
// it (netns.go), the second is celeryRun.run.
func runDistributed(ctx context.Context, o options, f flavor) error {
	if o.netnsDir == "" {
		return runInNetwork(ctx, o, f.workers())
	}
	n, err := loadNetwork(o.netnsDir)
	if err != nil {
		return err
	}
	c := &celeryRun{o: o, n: n, f: f, started: time.Now()}
	return c.run(ctx)
}

// celeryRun is the second part: everything it started and what it saw.
type celeryRun struct {
	o       options
	f       flavor
	n       *network
	w       *workdir
	started time.Time

	store   *store
	modal   *modalServer
	pg      *postgres
	redis   *redisServer
	redisUp bool
	a       *airflowSetup
	af      *deployment
	api     *apiClient
	workers []*hostWorker

	conversion, pipeline, maintenance *scenario

	runs      []*dagRun // every run, in the order triggered
	handoffs  int
	destroyed map[string]string // sandbox id -> the maintenance run that destroyed it
	failures  []string          // expectations that did not hold
}

// expect records an expectation, printing it either way.
func (c *celeryRun) expect(ok bool, format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	if ok {
		info("ok: %s", msg)
		return
	}
	info("FAILED: %s", msg)
	c.failures = append(c.failures, msg)
}

func (c *celeryRun) alive() error {
	checks := []func() error{c.af.checkAlive, c.pg.alive}
	if c.redisUp {
		checks = append(checks, c.redis.alive)
	}
	for _, cw := range c.workers {
		checks = append(checks, cw.alive)
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func (c *celeryRun) run(ctx context.Context) (err error) {
	w, err := newWorkdir()
	if err != nil {
		return err
	}
	c.w = w
	defer func() {
		if err != nil || c.o.keep || ctx.Err() != nil {
			fmt.Printf("\nwork directory kept: %s (Airflow homes, component, worker and task logs, S3 data)\n", w.root)
			return
		}
		if rmErr := os.RemoveAll(w.root); rmErr != nil {
			fmt.Fprintf(os.Stderr, "could not remove the work directory %s: %v\n", w.root, rmErr)
		}
	}()
	// PostgreSQL runs as nobody, which must reach its directory.
	if err := os.Chmod(w.root, 0o711); err != nil {
		return err
	}
	info("work directory %s", w.root)
	if err := c.pickScenarios(); err != nil {
		return err
	}

	step("packing the bundles into %s (the image every worker gets)", w.executables)
	if err := packBundles(ctx, c.o, w); err != nil {
		return err
	}
	// Each stop runs however far its start got.
	defer c.stopServices()
	if err := c.startServices(ctx); err != nil {
		return err
	}
	err = c.startAirflow(ctx)
	if c.af != nil {
		defer c.af.stop()
	}
	if err != nil {
		return err
	}
	defer c.stopWorkers()
	if err := c.startWorkers(ctx); err != nil {
		return err
	}

	step("waiting for the Dags to be parsed")
	for _, s := range []*scenario{c.conversion, c.pipeline, c.maintenance} {
		if err := c.api.waitDag(ctx, s.dagID, c.o.bootWait, c.alive); err != nil {
			return err
		}
		info("%s parsed", s.dagID)
	}

	c.destroyed = map[string]string{}
	if err := c.cleanBatch(ctx); err != nil {
		return c.finish(err)
	}
	for _, fault := range c.f.faults(c) {
		if err := fault(ctx); err != nil {
			return c.finish(err)
		}
	}
	return c.finish(nil)
}

// pickScenarios: the Celery run uses the two sandbox examples and the
// maintenance Dag.
func (c *celeryRun) pickScenarios() error {
	for _, s := range scenarios {
		if s.runSuffix != "" {
			continue // a second run of the Dag, with a fault of its own
		}
		switch s.dagID {
		case "sandbox_conversion":
			c.conversion = s
		case "sandbox_pipeline":
			c.pipeline = s
		}
	}
	if c.conversion == nil || c.pipeline == nil {
		return errors.New("the scenarios lack sandbox_conversion or sandbox_pipeline")
	}
	example, err := findExample(c.o.repo, maintenanceDagID)
	if err != nil {
		return err
	}
	c.maintenance = &scenario{dagID: maintenanceDagID, example: example}
	scenarios = []*scenario{c.conversion, c.pipeline, c.maintenance}
	return nil
}

// findExample is the examples/ directory whose dag.py defines dagID.
func findExample(repo, dagID string) (string, error) {
	files, _ := filepath.Glob(filepath.Join(repo, "examples", "*", "dag.py"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err == nil && strings.Contains(string(data), `dag_id="`+dagID+`"`) {
			return filepath.Base(filepath.Dir(f)), nil
		}
	}
	return "", fmt.Errorf("no examples/*/dag.py defines the maintenance Dag %s", dagID)
}

func (c *celeryRun) startServices(ctx context.Context) error {
	w := c.w
	step("starting versitygw (S3) on %s", controlAddr)
	var err error
	if c.store, err = startStore(ctx, c.o, w, controlAddr); err != nil {
		return err
	}
	info("endpoint %s, bucket %s", c.store.srv.Endpoint, bucket)

	step("starting the fake Modal server on %s", controlAddr)
	if c.modal, err = startModal(w, controlAddr); err != nil {
		return err
	}
	info("%s; the workers reach it across the bridge", c.modal.srv.URL())

	role := "metadata database"
	if c.f.broker() {
		role += ", Celery result backend"
	}
	step("starting PostgreSQL (%s) on %s", role, controlAddr)
	if c.pg, err = startPostgres(ctx, c.o, filepath.Join(w.root, "postgres"), controlAddr, w.logs); err != nil {
		return err
	}
	info("%s, database airflow, log %s", c.pg.addr, filepath.Join(w.logs, "postgres.log"))

	if !c.f.broker() {
		return nil
	}
	step("starting Redis (Celery broker) on %s", controlAddr)
	if c.redis, err = startRedis(ctx, filepath.Join(w.root, "redis"), controlAddr, w.logs); err != nil {
		return err
	}
	c.redisUp = true
	info("%s (password-protected, append-only)", c.redis.addr)
	return nil
}

func (c *celeryRun) stopServices() {
	if c.redis != nil && c.redisUp {
		c.redis.stop()
	}
	if c.pg != nil {
		c.pg.stop()
	}
	if c.modal != nil {
		if err := c.modal.stop(); err != nil {
			c.failures = append(c.failures, err.Error())
		}
	}
	if c.store != nil {
		c.store.stop()
	}
}

// settings are what the deployment changes in every component's settings:
// the flavor's, and the scheduler's timeouts, shortened so that the faults
// play out within the run.
func (c *celeryRun) settings() map[string]string {
	set := map[string]string{
		"AIRFLOW__CORE__PARALLELISM":                                             "32",
		"AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT":                    fmt.Sprint(heartbeatTimeout),
		"AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
		// A task whose message the broker lost waits queued this long.
		"AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT":                "180",
		"AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT_CHECK_INTERVAL": "30",
	}
	maps.Copy(set, c.f.settings(c))
	return set
}

// workerOnly are the settings that belong on the workers alone: the
// coordinator config, the bundles' directory, the state directory and the
// Modal client's settings. The control plane is started without them,
// which proves it needs none.
var workerOnly = []string{"AIRFLOW__SDK__COORDINATORS", "AIRFLOW__SDK__QUEUE_TO_COORDINATOR", "XDG_STATE_HOME", "MODAL_"}

func (c *celeryRun) startAirflow(ctx context.Context) error {
	step("starting Airflow from %s (%sExecutor, PostgreSQL) on %s", c.o.venv, c.f.name(), controlAddr)
	a, err := prepareAirflow(ctx, c.o, c.w, controlAddr)
	if err != nil {
		return err
	}
	c.a = a
	info("Airflow %s, AIRFLOW_HOME=%s", a.version, c.w.home)
	control := withoutEnv(withEnv(a.env, c.settings()), workerOnly...)
	apiEnv := append(append([]string(nil), control...), apiConnections(c.store, c.modal)...)
	af, err := a.boot(ctx, c.o, c.w, control, apiEnv)
	c.af = af
	if af != nil {
		c.api = af.api
	}
	return err
}

// startWorkers installs the bundles and Dag files on each worker host and
// starts its Celery worker with the worker's settings: the control plane's
// (minus what only the control plane needs) plus its own coordinator
// config, executables_root, state directory and Modal settings.
func (c *celeryRun) startWorkers(ctx context.Context) error {
	base := withoutEnv(withEnv(c.a.env, c.settings()), c.f.offWorkers()...)
	for i := 1; i <= c.f.workers(); i++ {
		cw, err := newHostWorker(c.w, c.n.Workers[i-1], i, strings.ToLower(c.f.name())+" worker")
		if err != nil {
			return err
		}
		c.workers = append(c.workers, cw)
		if err := install(c.w.executables, cw.executables); err != nil {
			return fmt.Errorf("installing the bundles on %s: %w", cw.host, err)
		}
		if err := install(c.w.dags, cw.dags); err != nil {
			return fmt.Errorf("installing the Dag files on %s: %w", cw.host, err)
		}
		own := coordinatorSettings(cw.executables)
		own["AIRFLOW_HOME"], own["AIRFLOW__CORE__DAGS_FOLDER"], own["XDG_STATE_HOME"] = cw.home, cw.dags, cw.state
		maps.Copy(own, c.f.setUp(c, cw))
		cw.env = append(withEnv(base, own), c.modal.env()...)
	}
	step("checking each worker's Dags against its executables_root (airflow-go-worker check, with the worker's settings)")
	errs := make([]error, len(c.workers))
	var wg sync.WaitGroup
	for i, cw := range c.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := c.check(ctx, cw); err != nil {
				errs[i] = fmt.Errorf("check on %s: %v\n%s", cw.host, err, out)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	info("no findings on any worker")
	step("starting %d %s workers (queues %s, %d slots each)", len(c.workers), c.f.name(), celeryWorkerQueues, workerConcurrency)
	for _, cw := range c.workers {
		if err := cw.launch(); err != nil {
			return err
		}
	}
	for _, cw := range c.workers {
		if err := cw.waitReady(ctx, c.o.bootWait); err != nil {
			return err
		}
		info("%s ready", cw.host)
	}
	return nil
}

// check runs `airflow-go-worker check` as the deployment docs say, on a
// worker: its Dags folder, its Airflow settings (the coordinator config
// names its executables_root), the venv's python. Its output, and an
// error when it found something or could not run.
func (c *celeryRun) check(ctx context.Context, cw *hostWorker) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.o.workerBin, "check", "--dags", cw.dags, "--python", filepath.Join(c.o.venv, "bin", "python"))
	cmd.Env = cw.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (c *celeryRun) stopWorkers() {
	step("stopping the %s workers", c.f.name())
	var wg sync.WaitGroup
	for _, cw := range c.workers {
		wg.Add(1)
		go func() { defer wg.Done(); cw.stop() }()
	}
	wg.Wait()
}

// withEnv is env with set's keys replaced or added.
func withEnv(env []string, set map[string]string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			out = append(out, kv)
		}
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, k+"="+set[k])
	}
	return out
}

// withoutEnv is env without the keys named (a name ending in _ drops
// every key it prefixes).
func withoutEnv(env []string, drop ...string) []string {
	var out []string
next:
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		for _, d := range drop {
			if k == d || (strings.HasSuffix(d, "_") && strings.HasPrefix(k, d)) {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

// finish prints the summary and turns the failed expectations into the
// run's error.
func (c *celeryRun) finish(err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if c.api != nil {
		c.addScheduledSweeps(ctx)
	}
	left := c.sandboxesLeft()
	printSummary(c.runs)
	fmt.Printf("cross-worker handoffs: %d\n", c.handoffs)
	fmt.Printf("sandboxes left: %d\n", len(left))
	fmt.Printf("\n%d Dag runs, %s in all\n", len(c.runs), time.Since(c.started).Round(time.Second))
	if err != nil {
		return err
	}
	if len(left) > 0 {
		c.failures = append(c.failures, fmt.Sprintf("%d sandboxes left at the end: %s", len(left), strings.Join(left, ", ")))
	}
	if len(c.failures) > 0 {
		return fmt.Errorf("%d expectations did not hold:\n  - %s", len(c.failures), strings.Join(c.failures, "\n  - "))
	}
	return nil
}

// sandboxesLeft lists the sandboxes the fake Modal server still runs and
// any local sandbox on a worker (the examples run on Modal).
func (c *celeryRun) sandboxesLeft() []string {
	var left []string
	if c.modal != nil {
		left = c.modal.live()
	}
	for _, cw := range c.workers {
		for _, name := range sandboxesIn(cw.state) {
			left = append(left, cw.host+":"+name)
		}
	}
	return left
}

// addScheduledSweeps adds the maintenance Dag's runs the scheduler made on
// its own schedule to the summary.
func (c *celeryRun) addScheduledSweeps(ctx context.Context) {
	type runJSON struct {
		RunID string `json:"dag_run_id"`
		State string `json:"state"`
	}
	runs, err := listAll[runJSON](ctx, c.api, "/api/v2/dags/"+maintenanceDagID+"/dagRuns", "dag_runs")
	if err != nil {
		info("could not list the runs of %s: %v", maintenanceDagID, err)
		return
	}
	known := map[string]bool{}
	for _, r := range c.runs {
		if r.scenario == c.maintenance {
			known[r.runID] = true
		}
	}
	for _, r := range runs {
		if !known[r.RunID] {
			c.runs = append(c.runs, &dagRun{scenario: c.maintenance, runID: r.RunID, state: r.State})
		}
	}
}

// ownerRun is the batch run a sandbox's owner tag names, or nil.
func ownerRun(b *batch, tags map[string]string) *dagRun {
	return b.byKey[tags[sandbox.TagOwner]]
}
