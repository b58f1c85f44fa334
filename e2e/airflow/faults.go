package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// The batches of the Celery run. Each waits on states it can observe
// (Airflow's, the fake Modal server's), never on time; the fault batches
// hold the fake's sandbox creates (fakemodal HoldCreates) so that the
// moment a fault strikes is one where tasks certainly hold live sandboxes.

// batchTimeout bounds how long a batch may take to end.
const batchTimeout = 15 * time.Minute

// cleanBatch: 10 runs of each example at once; all succeed, pass their
// checks, and at least one sandbox is handed from one worker to the other.
func (c *celeryRun) cleanBatch(ctx context.Context) error {
	n := c.f.cleanRuns(c.o)
	step("clean batch: %d runs of %s and %d of %s at once", n, c.conversion.dagID, n, c.pipeline.dagID)
	b, err := c.trigger(ctx, "clean", batchPart{c.conversion, n}, batchPart{c.pipeline, n})
	if err != nil {
		return err
	}
	if err := b.wait(ctx, c.api, "the clean batch to end", batchTimeout, c.alive, nil); err != nil {
		return err
	}
	step("checking the clean batch through the REST API, the S3 server and the fake Modal server")
	env := &checkEnv{api: c.api, store: c.store, modal: c.modal, w: c.w, o: c.o, af: c.af}
	ok := 0
	for _, r := range b.runs {
		if r.state != "success" {
			c.api.printFailedTasks(ctx, r)
			continue
		}
		problems := r.scenario.check(ctx, env, r)
		for _, p := range problems {
			info("%s %s: check failed: %v", r.scenario.dagID, r.runID, p)
		}
		if len(problems) == 0 {
			ok++
		}
	}
	c.expect(ok == len(b.runs), "%d of the %d runs of the clean batch succeeded and passed their checks", ok, len(b.runs))
	c.countHandoffs(b)
	c.expect(c.handoffs > 0, "%d cross-worker handoffs: a task used a sandbox provisioned on the other worker", c.handoffs)
	workers := map[string]int{}
	for _, r := range b.runs {
		for _, ts := range r.tasks {
			if ts.host != "" {
				workers[ts.host]++
			}
		}
	}
	c.expect(len(workers) == len(c.workers), "tasks ran on every worker: %s", formatCounts(workers))
	for _, cw := range c.workers {
		c.expectServedLog(ctx, b, cw.host)
	}
	c.expect(len(c.modal.live()) == 0, "no sandbox is left after the clean batch (live: %v)", c.modal.live())
	return nil
}

// expectServedLog: the api-server serves the log of a task that ran on
// host, from where the flavor says (the log names its source): on Celery
// that worker's log server (http://<host>:<port>/log/..., so hostname,
// port and [api] secret_key agree across the hosts).
func (c *celeryRun) expectServedLog(ctx context.Context, b *batch, host string) {
	for _, r := range b.runs {
		for _, id := range r.taskIDs() {
			ts := r.tasks[id]
			if ts.host != host || ts.state != "success" {
				continue
			}
			text, err := c.api.taskLog(ctx, r, id, ts.try)
			source := c.f.logSource(c, host)
			c.expect(err == nil && strings.Contains(text, source), "the api-server serves %s's log of %s %s, run on %s, from %s%s",
				id, r.scenario.dagID, r.runID, host, source, errText(err))
			return
		}
	}
	c.expect(false, "a task of the batch succeeded on %s, whose log the api-server could serve", host)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

// countHandoffs counts the pipeline tasks that succeeded with a sandbox
// provisioned on another worker.
func (c *celeryRun) countHandoffs(b *batch) {
	for _, r := range b.runs {
		if r.scenario != c.pipeline {
			continue
		}
		from := r.tasks["provision"]
		for _, task := range []string{"run", "collect"} {
			ts := r.tasks[task]
			if ts.state == "success" && from.host != "" && ts.host != "" && ts.host != from.host {
				c.handoffs++
				info("handoff: %s %s provision on %s -> %s on %s", r.scenario.dagID, r.runID, from.host, task, ts.host)
			}
		}
	}
}

// trigger triggers a batch and records its runs for the summary.
func (c *celeryRun) trigger(ctx context.Context, name string, plan ...batchPart) (*batch, error) {
	b := newBatch(name)
	return b, c.triggerMore(ctx, b, plan...)
}

// triggerMore adds runs to a batch.
func (c *celeryRun) triggerMore(ctx context.Context, b *batch, plan ...batchPart) error {
	before := len(b.runs)
	err := b.trigger(ctx, c.api, plan...)
	c.runs = append(c.runs, b.runs[before:]...)
	return err
}

// faultKill: kill -9 worker1 while it runs a convert whose sandbox exists
// (held in create), then start it again. The killed tries' sandboxes stay
// on Modal (nothing ran their cleanup); Airflow fails the tries after the
// heartbeat timeout and retries convert, which succeeds. A pipeline
// provision killed with it has no retries: its run fails, and collect,
// the teardown of a setup that failed, does not run (upstream_failed), so
// its sandbox is the maintenance Dag's to remove.
func (c *celeryRun) faultKill(ctx context.Context) error {
	victim := c.workers[0]
	step("fault 1: kill -9 %s mid-task (heartbeat timeout %d s)", victim.host, heartbeatTimeout)
	// Two runs more than a worker has slots: at least one convert must be
	// on the victim while every first task holds its create.
	release := c.modal.srv.HoldCreates()
	defer release()
	b, err := c.trigger(ctx, "kill", batchPart{c.conversion, workerConcurrency + 1}, batchPart{c.pipeline, 2})
	if err != nil {
		return err
	}
	var leaked []string
	err = b.wait(ctx, c.api, "a convert on "+victim.host+" to hold a live sandbox", batchTimeout, c.alive, func() (bool, string) {
		leaked = c.heldOn(b, victim.host)
		for _, id := range leaked {
			for _, h := range c.modal.srv.HeldCreates() {
				if h.SandboxID == id && strings.HasPrefix(h.Tags[sandbox.TagOwner], c.conversion.dagID+"/") {
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("%d creates held, %d of them by tasks on %s", len(c.modal.srv.HeldCreates()), len(leaked), victim.host)
	})
	if err != nil {
		return err
	}
	info("killing %s: its tasks hold sandboxes %s", victim.host, strings.Join(leaked, ", "))
	if err := victim.kill(ctx); err != nil {
		return err
	}
	info("%s and everything it ran are gone (its namespace holds no process)", victim.host)
	release()
	step("starting %s again, as a restarted host", victim.host)
	if err := victim.start(ctx, c.o.bootWait); err != nil {
		return err
	}
	if err := b.wait(ctx, c.api, "the kill batch to end", batchTimeout, c.alive, nil); err != nil {
		return err
	}
	c.expectRetriedSucceeded(b)
	c.expectFailedRunFailsTheRun(b)
	killedConverts := 0
	for _, r := range b.runs {
		if r.scenario == c.conversion && r.tasks["convert"].try > 1 {
			killedConverts++
		}
	}
	c.expect(killedConverts > 0, "Airflow retried %d convert tasks whose worker was killed", killedConverts)
	if err := c.collectDestroyed(ctx); err != nil {
		return err
	}
	live := map[string]bool{}
	for _, s := range c.modal.srv.Sandboxes() {
		live[s.ID] = true
	}
	stayed := 0
	for _, id := range leaked {
		if live[id] || c.destroyed[id] != "" {
			stayed++
		}
	}
	c.expect(stayed == len(leaked), "the %d sandboxes the killed worker's tasks were seen holding outlived them: %d still there or removed by the maintenance Dag", len(leaked), stayed)
	return c.sweepAfter(ctx, "kill", leaked)
}

// heldOn lists the held creates made by the batch's tasks running on host.
func (c *celeryRun) heldOn(b *batch, host string) []string {
	var ids []string
	for _, h := range c.modal.srv.HeldCreates() {
		r := ownerRun(b, h.Tags)
		if r == nil {
			continue
		}
		for _, ts := range r.tasks {
			if ts.state == "running" && ts.host == host {
				ids = append(ids, h.SandboxID)
				break
			}
		}
	}
	return ids
}

// faultRedis: Redis stops for 20 s. Before, pipeline runs' provisions
// hold live sandboxes; during the outage they finish (the scheduler cannot
// send run and collect: their sandboxes are left) and conversion runs are
// triggered (convert cannot be sent; it has retries, so Airflow retries it
// once the broker is back).
func (c *celeryRun) faultRedis(ctx context.Context) error {
	step("fault 2: Redis stopped for %s during a batch", redisOutage)
	release := c.modal.srv.HoldCreates()
	defer release()
	b, err := c.trigger(ctx, "redis", batchPart{c.pipeline, workerConcurrency})
	if err != nil {
		return err
	}
	err = b.wait(ctx, c.api, "every provision to hold a live sandbox", batchTimeout, c.alive, func() (bool, string) {
		held := len(c.modal.srv.HeldCreates())
		return held == len(b.runs), fmt.Sprintf("%d of %d creates held", held, len(b.runs))
	})
	if err != nil {
		return err
	}
	info("stopping Redis (SIGTERM, as its service manager does)")
	c.redisUp = false
	c.redis.stop()
	outageEnds := time.Now().Add(redisOutage)
	c.expect(c.redis.ping() != nil, "Redis is down")
	if err := c.triggerMore(ctx, b, batchPart{c.conversion, workerConcurrency}); err != nil {
		return err
	}
	release()
	info("the held creates are released: the provisions finish while the broker is away")
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(outageEnds)):
	}
	step("starting Redis again on %s", c.redis.addr)
	if err := c.redis.start(ctx); err != nil {
		return err
	}
	c.redisUp = true
	if err := b.wait(ctx, c.api, "the Redis batch to end", batchTimeout, c.alive, nil); err != nil {
		return err
	}
	c.expectRetriedSucceeded(b)
	c.expectFailedRunFailsTheRun(b)
	return c.sweepAfter(ctx, "redis", nil)
}

// faultBundle: the pipeline's bundle is removed from worker2; its tasks
// that land there fail before they start (no hostname, no task log: the
// reason is in worker2's Celery log only). Creates are held until one
// has, so worker1's slots stay full and tasks must go to worker2.
func (c *celeryRun) faultBundle(ctx context.Context) error {
	victim := c.workers[1]
	name := c.pipeline.example + ".bundle"
	file := filepath.Join(victim.executables, name)
	step("fault 3: %s removed from %s", name, victim.host)
	if err := os.Remove(file); err != nil {
		return err
	}
	missing := "cannot find executable bundle containing dag_id='" + c.pipeline.dagID + "'"
	out, err := c.check(ctx, victim)
	c.expect(err != nil && strings.Contains(out, c.pipeline.dagID), "airflow-go-worker check on %s reports the Dag its executables_root lacks a bundle for:\n%s", victim.host, indent(out))
	release := c.modal.srv.HoldCreates()
	defer release()
	b, err := c.trigger(ctx, "bundle", batchPart{c.pipeline, workerConcurrency + 1}, batchPart{c.conversion, workerConcurrency - 1})
	if err != nil {
		return err
	}
	err = b.wait(ctx, c.api, "a pipeline task to fail on "+victim.host, batchTimeout, c.alive, func() (bool, string) {
		return strings.Contains(victim.logText(), missing), fmt.Sprintf("%d creates held; %s's log has no %q yet", len(c.modal.srv.HeldCreates()), victim.host, missing)
	})
	if err != nil {
		return err
	}
	release()
	if err := b.wait(ctx, c.api, "the bundle batch to end", batchTimeout, c.alive, nil); err != nil {
		return err
	}
	if err := copyFile(filepath.Join(c.w.executables, name), file); err != nil {
		return fmt.Errorf("putting %s back on %s: %w", name, victim.host, err)
	}
	hits := strings.Contains(victim.logText(), missing)
	noHost := 0
	for _, r := range b.runs {
		for _, ts := range r.tasks {
			if ts.state == "failed" && ts.host == "" {
				noHost++
			}
		}
	}
	c.expect(hits && noHost > 0, "tries failed on %s for want of the bundle (its Celery log says %q); Airflow shows %d failed tasks with no hostname", victim.host, missing, noHost)
	c.expectRetriedSucceeded(b)
	c.expectFailedRunFailsTheRun(b)
	return c.sweepAfter(ctx, "bundle", nil)
}

// expectFailedRunFailsTheRun: no pipeline run whose run task did not
// succeed (failed on a killed or bundle-less worker, never sent, or
// upstream_failed after provision) ended success. collect is a teardown,
// which leaves the run's state to run; under trigger rule all_done it was
// the Dag's only leaf, and such a run ended success when collect did.
func (c *celeryRun) expectFailedRunFailsTheRun(b *batch) {
	notRun := 0
	var bad []string
	for _, r := range b.runs {
		if r.scenario != c.pipeline || r.tasks["run"].state == "success" {
			continue
		}
		notRun++
		if r.state == "success" {
			bad = append(bad, r.scenario.dagID+" "+r.runID)
		}
	}
	c.expect(len(bad) == 0, "every %s run of the %s batch whose run task did not succeed ended failed (%d such runs)%s", c.pipeline.dagID, b.name, notRun, listed(bad))
}

// expectRetriedSucceeded: every run in which Airflow retried a task ended
// in success.
func (c *celeryRun) expectRetriedSucceeded(b *batch) {
	retried, ok := 0, 0
	var bad []string
	for _, r := range b.runs {
		for _, ts := range r.tasks {
			if ts.try > 1 {
				retried++
				if r.state == "success" {
					ok++
				} else {
					bad = append(bad, r.scenario.dagID+" "+r.runID)
				}
				break
			}
		}
	}
	_, states := b.counts()
	info("%s batch: %s", b.name, formatCounts(states))
	c.expect(ok == retried, "every run in which Airflow retried a task succeeded (%d of %d)%s", ok, retried, listed(bad))
}

func indent(s string) string {
	return "      | " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n      | ")
}

func listed(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return " (not: " + strings.Join(s, ", ") + ")"
}

// sweepAfter runs the maintenance Dag once the fault's runs have ended and
// checks that the fake Modal server holds no sandbox afterwards, and that
// the sandboxes the fault must have left (must) were destroyed by a
// maintenance run.
func (c *celeryRun) sweepAfter(ctx context.Context, fault string, must []string) error {
	live := c.modal.live()
	step("after fault %q: %d sandboxes left by ended runs; running %s", fault, len(live), maintenanceDagID)
	for _, l := range live {
		info("left: %s", l)
	}
	for _, sb := range c.modal.srv.Sandboxes() {
		if !slices.Contains(must, sb.ID) {
			must = append(must, sb.ID)
		}
	}
	b, err := c.trigger(ctx, "sweep_after_"+fault, batchPart{c.maintenance, 1})
	if err != nil {
		return err
	}
	if err := b.wait(ctx, c.api, maintenanceDagID+" to end", batchTimeout, c.alive, nil); err != nil {
		return err
	}
	r := b.runs[0]
	c.expect(r.state == "success", "%s %s ended %s", maintenanceDagID, r.runID, r.state)
	if r.state != "success" {
		c.api.printFailedTasks(ctx, r)
	}
	if err := c.collectDestroyed(ctx); err != nil {
		info("reading what the maintenance runs destroyed: %v", err)
	}
	var missed []string
	for _, id := range must {
		if c.destroyed[id] == "" {
			missed = append(missed, id)
		}
	}
	c.expect(len(missed) == 0, "a maintenance run destroyed each of the %d sandboxes the ended runs of fault %q left%s", len(must), fault, listed(missed))
	left := c.modal.live()
	c.expect(len(left) == 0, "after the maintenance Dag the fake Modal server holds 0 sandboxes (holds %d: %v)", len(left), left)
	return nil
}

// collectDestroyed reads, from every run of the maintenance Dag so far
// (the scheduled ones too), the sandboxes its tasks reported destroyed
// (XCom return_value: {"sandboxes": [{"destroyed": [...]}, ...]}).
func (c *celeryRun) collectDestroyed(ctx context.Context) error {
	type tiJSON struct {
		RunID  string  `json:"dag_run_id"`
		TaskID string  `json:"task_id"`
		State  *string `json:"state"`
	}
	tis, err := listAll[tiJSON](ctx, c.api, "/api/v2/dags/"+maintenanceDagID+"/dagRuns/~/taskInstances", "task_instances")
	if err != nil {
		return err
	}
	for _, ti := range tis {
		if ti.State == nil || *ti.State != "success" {
			continue
		}
		var entry struct {
			Value json.RawMessage `json:"value"`
		}
		p := "/api/v2/dags/" + maintenanceDagID + "/dagRuns/" + url.PathEscape(ti.RunID) + "/taskInstances/" + url.PathEscape(ti.TaskID) + "/xcomEntries/return_value"
		if err := c.api.do(ctx, "GET", p, nil, &entry, ""); err != nil {
			continue // a task that returned nothing
		}
		var res struct {
			Sandboxes []struct {
				Destroyed []string `json:"destroyed"`
			} `json:"sandboxes"`
		}
		if json.Unmarshal(entry.Value, &res) != nil {
			continue
		}
		var ids []string
		for _, s := range res.Sandboxes {
			ids = append(ids, s.Destroyed...)
		}
		for _, id := range ids {
			if c.destroyed[id] == "" {
				c.destroyed[id] = ti.RunID
				info("%s %s destroyed %s", maintenanceDagID, ti.RunID, id)
			}
		}
	}
	return nil
}
