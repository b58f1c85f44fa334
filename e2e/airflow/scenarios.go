package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	polling "github.com/airflow-sandbox/airflow-go-worker/internal/poll"
)

// scenario is one example Dag: how it is packed, how it is triggered, and
// what must be true once its run succeeded.
type scenario struct {
	dagID   string
	example string // examples/<example>: dag.py plus bundle.yaml or main.go
	goMain  bool   // packed from its own Go main (go_tasks), not a bundle config
	proves  string // what a passing check shows
	check   func(ctx context.Context, e *checkEnv, r *dagRun) []error
	// A second run of a Dag has a run id suffix of its own; wantState is
	// the state Airflow must give the run ("" = success); before runs
	// right before the trigger (the scripted model's mode for the run).
	runSuffix string
	wantState string
	before    func(e *checkEnv, r *dagRun)
	// awaitPrefix: the scheduler starts the run (the Dag is scheduled on an
	// asset an earlier scenario's run updates); the driver waits for a run
	// whose id begins with it instead of triggering one.
	awaitPrefix string
	// together: triggered at once with the together scenarios next to it
	// in the list, then waited for (runAll).
	together bool
	// testdata: the Dag is one check refuses, kept in
	// e2e/airflow/testdata/<example> rather than examples/.
	testdata bool
}

// dir is the directory, relative to the repository, holding the scenario's
// dag.py and bundle.yaml or main.go.
func (s *scenario) dir() string {
	if s.testdata {
		return filepath.Join("e2e", "airflow", "testdata", s.example)
	}
	return filepath.Join("examples", s.example)
}

// want is the run state the scenario expects Airflow to decide.
func (s *scenario) want() string {
	if s.wantState == "" {
		return "success"
	}
	return s.wantState
}

// checkEnv is what the checks read: Airflow's REST API, the S3 server, the
// fake Modal server, the scripted model, and the work directory.
type checkEnv struct {
	api   *apiClient
	store *store
	modal *modalServer
	llm   *llmServer
	w     *workdir
	o     options
	af    *deployment
}

// alive fails when an Airflow component has exited.
func (e *checkEnv) alive() error { return e.af.checkAlive() }

// The Dags are triggered with an empty dag_run.conf: they run as shipped,
// on backend: modal (the fake), and no example lets a run choose another.
var scenarios = []*scenario{
	{
		dagID: "sandbox_conversion", example: "conversion",
		proves: "convert staged orders.csv from S3, converted it in a Modal sandbox and wrote both outputs to S3; announce got its XCom",
		check:  checkConversion,
	},
	{
		dagID: "orders_report", example: "orders_report", awaitPrefix: "asset_triggered__",
		proves: "sandbox_conversion's asset event started this run; report staged the object the event's extra named (the conversion's orders.jsonl), totalled it in a Modal sandbox and wrote totals.csv to S3",
		check:  checkOrdersReport,
	},
	{
		dagID: "mapped_conversion", example: "mapped_conversion",
		proves: "list_objects (Go, kind: list) listed the prefix's three CSVs and nothing else under it, and convert, mapped over them, converted each object in a Modal sandbox of its own, each instance named by its object, and summarize got every instance's result in map-index order",
		check:  checkMappedConversion,
	},
	{
		dagID: "sandbox_pipeline", example: "sandbox_pipeline",
		proves: "provision -> run -> collect handed one Modal sandbox on through XCom, the totals landed in S3, no sandbox is left",
		check:  checkPipeline,
	},
	{
		dagID: "sandbox_pipeline", example: "sandbox_pipeline", runSuffix: "_run_fails", wantState: "failed",
		proves: "with run's second command failed by the fake Modal server, Airflow failed the run although collect, the teardown, succeeded: it exported the totals the first command wrote and destroyed the sandbox",
		check:  checkPipelineRunFails,
		before: func(e *checkEnv, r *dagRun) { e.modal.failCommands(r.scenario.dagID, r.runID, pipelineSecondCommand) },
	},
	{
		dagID: "go_tasks_example", example: "go_tasks", goMain: true,
		proves: "fetch_orders' totals reached rank_customers, whose ranking (made in a Modal sandbox) reached publish_ranking, through XCom; the catalogue's sweep (cleanup) ran in the same bundle; latest_conversion read sandbox_conversion's asset event as its Python twin did through inlet_events",
		check:  checkGoTasks,
	},
	{
		dagID: "sandbox_agent_handoff", example: "agent_handoff",
		proves: "provision made a Modal sandbox, common.ai's AgentOperator ran its four tools in it for the scripted model, collect exported the agent's report to S3 and destroyed the sandbox",
		check:  checkAgentHandoff,
		before: func(e *checkEnv, r *dagRun) { e.llm.serve(r.runID, false) },
	},
	{
		dagID: "sandbox_agent_handoff", example: "agent_handoff", runSuffix: "_model_down", wantState: "failed",
		proves: "with the model answering HTTP 500, analyse failed, collect still ran and destroyed the sandbox, and Airflow failed the run",
		check:  checkAgentModelDown,
		before: func(e *checkEnv, r *dagRun) { e.llm.serve(r.runID, true) },
	},
	// Issue 37: Go stubs beside their Python twins, both runs at once. Each
	// fails on purpose (its timeout pair; go_echo's instances).
	{
		dagID: "stub_semantics", example: "stub_semantics", wantState: "failed", together: true,
		proves: "each Go stub ended as its Python twin: execution_timeout stopped go_sleep's hanging command at the limit in both tries (failed after its retry, its sandboxes destroyed) as it stopped py_sleep; go_branch ran left and the join and skipped right as py_branch did; go_env's keys became XComs of their own, its env the Dag param's default, as py_env's",
		check:  checkStubSemantics,
	},
	{
		dagID: "stub_refused", example: "stub_refused", testdata: true, wantState: "failed", together: true,
		proves: "what check refuses, run anyway: go_echo's .expand_kwargs() instances failed at once naming what to write while py_echo's got their elements; the Dag's on_failure_callback ran for the Go task's failure",
		check:  checkStubRefused,
	},
}

func dagIDs() []string {
	var ids []string
	for _, s := range scenarios {
		if !slices.Contains(ids, s.dagID) {
			ids = append(ids, s.dagID)
		}
	}
	return ids
}

// selectScenarios keeps the scenarios of a comma-separated list of Dag ids.
func selectScenarios(list string) error {
	if list == "" {
		return nil
	}
	var keep []*scenario
	for _, id := range strings.Split(list, ",") {
		found := false
		for _, s := range scenarios {
			if s.dagID == strings.TrimSpace(id) {
				keep, found = append(keep, s), true
			}
		}
		if !found {
			return fmt.Errorf("-dags: no example Dag %q; the Dags are %s", id, strings.Join(dagIDs(), ", "))
		}
	}
	scenarios = keep
	return nil
}

// runAll triggers the scenarios' Dags one after the other, each once the
// previous run finished: their progress reads in order, and the 2-core
// machine runs one Dag's tasks at a time next to Airflow itself. Scenarios
// marked together that follow each other are triggered at once and then
// waited for: they prove Airflow semantics, not load, and mostly wait on
// timeouts. All runs together get timeout. A run that fails does not stop
// the others.
func runAll(ctx context.Context, e *checkEnv, list []*scenario, timeout time.Duration, alive func() error) ([]*dagRun, error) {
	runID := "airflow_e2e__" + time.Now().UTC().Format("20060102T150405Z")
	deadline := time.Now().Add(timeout)
	var runs []*dagRun
	for i := 0; i < len(list); {
		n := batchLen(list[i:])
		batch := make([]*dagRun, 0, n)
		for _, s := range list[i : i+n] {
			r, err := startRun(ctx, e, s, runID, deadline, alive)
			if err != nil {
				return runs, err
			}
			runs, batch = append(runs, r), append(batch, r)
		}
		for _, r := range batch {
			if err := waitRun(ctx, e.api, r, time.Until(deadline), alive); err != nil {
				return runs, err
			}
		}
		i += n
	}
	return runs, nil
}

// batchLen is how many scenarios at the start of list run at once: the
// first, and those marked together right after it when it is too.
func batchLen(list []*scenario) int {
	n := 1
	for list[0].together && n < len(list) && list[n].together {
		n++
	}
	return n
}

// startRun triggers s's Dag (or, for a Dag the scheduler starts on an
// asset event, waits for that run to appear).
func startRun(ctx context.Context, e *checkEnv, s *scenario, runID string, deadline time.Time, alive func() error) (*dagRun, error) {
	r := &dagRun{scenario: s, runID: runID + s.runSuffix, state: "queued"}
	if s.before != nil {
		s.before(e, r)
	}
	if s.awaitPrefix != "" {
		step("waiting for the scheduler to start a run of %s (%s...)", s.dagID, s.awaitPrefix)
		id, err := e.api.awaitRun(ctx, s.dagID, s.awaitPrefix, time.Until(deadline), alive)
		if err != nil {
			return nil, err
		}
		r.runID = id
		return r, nil
	}
	step("triggering %s (run %s, no conf)", s.dagID, r.runID)
	if err := e.api.trigger(ctx, s.dagID, r.runID); err != nil {
		return nil, fmt.Errorf("triggering %s: %w", s.dagID, err)
	}
	return r, nil
}

// waitRun polls a run until it is success or failed, printing every task
// state change and, every 30 s, that it still waits. Past timeout it
// stops waiting and leaves the run in the state it reached. A request that
// fails (the api-server busy) is retried until then. It returns an error
// only when Airflow itself died or the driver was interrupted.
func waitRun(ctx context.Context, api *apiClient, r *dagRun, timeout time.Duration, alive func() error) error {
	start := time.Now()
	nextNote := start.Add(30 * time.Second)
	seen := map[string]string{}
	var lastErr error
	err := polling.Until(ctx, timeout, polling.Every(2*time.Second), func() (bool, error) {
		if err := api.runState(ctx, r); err != nil {
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			if lastErr == nil {
				info("%5s  reading the run's state failed, retrying: %v", time.Since(start).Round(time.Second), err)
			}
			lastErr = err
		} else {
			lastErr = nil
			for _, id := range r.taskIDs() {
				if st := r.tasks[id].state; seen[id] != st {
					seen[id] = st
					info("%5s  %s.%s: %s", time.Since(start).Round(time.Second), r.scenario.dagID, id, st)
				}
			}
			if r.state == "success" || r.state == "failed" {
				info("%5s  %s run %s", time.Since(start).Round(time.Second), r.scenario.dagID, r.state)
				return true, nil
			}
		}
		if err := alive(); err != nil {
			return false, err
		}
		if time.Now().After(nextNote) {
			info("%5s  still waiting for %s (%s)", time.Since(start).Round(time.Second), r.scenario.dagID, r.state)
			nextNote = time.Now().Add(30 * time.Second)
		}
		return false, nil
	})
	if !errors.Is(err, polling.ErrTimeout) {
		return err
	}
	if lastErr != nil {
		fmt.Printf("    gave up waiting for %s after %s; the last request failed: %v\n", r.scenario.dagID, timeout.Round(time.Second), lastErr)
	} else {
		fmt.Printf("    gave up waiting for %s after %s: it is still %s\n", r.scenario.dagID, timeout.Round(time.Second), r.state)
	}
	return nil
}

// orders is examples/conversion/orders.csv, as records and per-customer totals.
type orders struct {
	header []string
	rows   [][]string
	totals map[string]float64
}

func parseOrders(data []byte) (orders, error) {
	recs, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
	if err != nil || len(recs) < 2 {
		return orders{}, fmt.Errorf("orders.csv: %v (%d records)", err, len(recs))
	}
	o := orders{header: recs[0], rows: recs[1:], totals: map[string]float64{}}
	cust, amt := index(o.header, "customer"), index(o.header, "amount")
	if cust < 0 || amt < 0 {
		return orders{}, fmt.Errorf("orders.csv: header %v lacks customer or amount", o.header)
	}
	for _, r := range o.rows {
		v, err := strconv.ParseFloat(r[amt], 64)
		if err != nil {
			return orders{}, fmt.Errorf("orders.csv: amount %q: %v", r[amt], err)
		}
		o.totals[r[cust]] += v
	}
	return o, nil
}

func index(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

// allSucceeded is a problem per task of the run that did not succeed.
func allSucceeded(r *dagRun, want ...string) []error {
	var errs []error
	for _, id := range want {
		if st, ok := r.tasks[id]; !ok || st.state != "success" {
			errs = append(errs, fmt.Errorf("task %s is %q, want success", id, st.state))
		}
	}
	return errs
}

func checkConversion(ctx context.Context, e *checkEnv, r *dagRun) []error {
	errs := allSucceeded(r, "convert", "announce")
	in, err := parseOrders(e.store.input)
	if err != nil {
		return append(errs, err)
	}
	// Keyed by run (the config's {run_id}), so concurrent runs never
	// overwrite each other.
	key := "converted/" + r.runID + "/orders.jsonl"
	wantURLs := []string{"s3://" + bucket + "/" + key, "s3://" + bucket + "/" + key + ".gz"}
	var res struct {
		URLs     []string `json:"urls"`
		ExitCode *int     `json:"exit_code"`
	}
	if err := e.api.xcom(ctx, r, "convert", "return_value", &res); err != nil {
		errs = append(errs, err)
	} else {
		if !reflect.DeepEqual(res.URLs, wantURLs) {
			errs = append(errs, fmt.Errorf("convert returned urls %v, want %v", res.URLs, wantURLs))
		}
		if res.ExitCode == nil || *res.ExitCode != 0 {
			errs = append(errs, fmt.Errorf("convert returned exit_code %v, want 0", res.ExitCode))
		}
	}
	var announced []string
	if err := e.api.xcom(ctx, r, "announce", "return_value", &announced); err != nil {
		errs = append(errs, err)
	} else if !reflect.DeepEqual(announced, wantURLs) {
		errs = append(errs, fmt.Errorf("announce (Python) returned %v, want convert's urls %v", announced, wantURLs))
	}

	jsonl, err := e.store.get(ctx, key)
	if err != nil {
		return append(errs, err)
	}
	lines := strings.Split(strings.TrimRight(string(jsonl), "\n"), "\n")
	if len(lines) != len(in.rows) {
		errs = append(errs, fmt.Errorf("%s has %d lines, want one per order (%d)", key, len(lines), len(in.rows)))
	}
	for i, l := range lines[:min(len(lines), len(in.rows))] {
		var got map[string]string
		if err := json.Unmarshal([]byte(l), &got); err != nil {
			errs = append(errs, fmt.Errorf("%s line %d is not a JSON object of strings: %v: %s", key, i+1, err, l))
			continue
		}
		want := map[string]string{}
		for j, h := range in.header {
			want[h] = in.rows[i][j]
		}
		if !reflect.DeepEqual(got, want) {
			errs = append(errs, fmt.Errorf("%s line %d is %v, want %v", key, i+1, got, want))
		}
	}
	gz, err := e.store.get(ctx, key+".gz")
	if err != nil {
		return append(errs, err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err == nil {
		var plain []byte
		if plain, err = io.ReadAll(zr); err == nil && !bytes.Equal(plain, jsonl) {
			err = fmt.Errorf("it does not decompress to orders.jsonl")
		}
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("%s.gz: %v", key, err))
	}
	errs = append(errs, noPartials(ctx, e, "converted/")...)
	return append(errs, ranOnModal(e, r)...)
}

// checkOrdersReport: the run was started by sandbox_conversion's asset
// event (its run id and the REST API's upstream events say so), and report
// converted exactly the object that event's extra named.
func checkOrdersReport(ctx context.Context, e *checkEnv, r *dagRun) []error {
	errs := allSucceeded(r, "report")
	evs, err := e.api.upstreamAssetEvents(ctx, r)
	if err != nil {
		return append(errs, err)
	}
	if len(evs) != 1 || evs[0].Name != "converted_orders" || evs[0].SourceDagID != "sandbox_conversion" || evs[0].SourceTaskID != "convert" {
		return append(errs, fmt.Errorf("the run was triggered by asset events %+v, want one event of converted_orders from sandbox_conversion.convert", evs))
	}
	ev := evs[0]
	// The extra convert reported: what its exports wrote.
	jsonl := "s3://" + bucket + "/converted/" + ev.SourceRunID + "/orders.jsonl"
	urls, _ := ev.Extra["urls"].([]any)
	if len(urls) != 2 || urls[0] != jsonl || urls[1] != jsonl+".gz" {
		errs = append(errs, fmt.Errorf("the event's extra.urls is %v, want [%s %s.gz]", ev.Extra["urls"], jsonl, jsonl))
	}
	if b, ok := ev.Extra["bytes"].(float64); !ok || b <= 0 {
		errs = append(errs, fmt.Errorf("the event's extra.bytes is %v, want the bytes the exports wrote", ev.Extra["bytes"]))
	}
	if !strings.HasPrefix(ev.SourceRunID, "airflow_e2e__") {
		errs = append(errs, fmt.Errorf("the event came from run %s, not this driver's sandbox_conversion run", ev.SourceRunID))
	}
	errs = append(errs, logSays(ctx, e, r, "report", "converted/"+ev.SourceRunID+"/orders.jsonl")...)
	in, err := parseOrders(e.store.input)
	if err != nil {
		return append(errs, err)
	}
	key := "reports/" + r.runID + "/totals.csv"
	var res struct {
		URLs []string `json:"urls"`
	}
	if err := e.api.xcom(ctx, r, "report", "return_value", &res); err != nil {
		errs = append(errs, err)
	} else if want := []string{"s3://" + bucket + "/" + key}; !reflect.DeepEqual(res.URLs, want) {
		errs = append(errs, fmt.Errorf("report returned urls %v, want %v", res.URLs, want))
	}
	if got, err := e.store.get(ctx, key); err != nil {
		errs = append(errs, err)
	} else if want := totalsCSV(in); string(got) != want {
		errs = append(errs, fmt.Errorf("s3://%s/%s is %q, want the totals of the converted orders, %q", bucket, key, got, want))
	}
	errs = append(errs, noPartials(ctx, e, "reports/")...)
	return append(errs, ranOnModal(e, r)...)
}

// checkMappedConversion: three mapped instances of convert, one per object
// list_objects named, each converted its own object (in a sandbox of its
// own) and is named by it in the UI; summarize got all results in order.
func checkMappedConversion(ctx context.Context, e *checkEnv, r *dagRun) []error {
	errs := allSucceeded(r, "list_objects", "summarize")
	var listed []string
	if err := e.api.xcom(ctx, r, "list_objects", "return_value", &listed); err != nil {
		return append(errs, err)
	}
	if want := regionURLs(e.o.repo); len(want) < 3 || !reflect.DeepEqual(listed, want) {
		return append(errs, fmt.Errorf("list_objects (kind: list) returned %v, want the CSVs under the prefix, sorted, without the README or the export in flight: %v", listed, want))
	}
	var wantURLs []string
	for i, obj := range listed {
		inst := instanceKey("convert", i)
		ts, ok := r.tasks[inst]
		if !ok || ts.state != "success" {
			errs = append(errs, fmt.Errorf("mapped instance %s is %q, want success", inst, ts.state))
			continue
		}
		if ts.rendered != obj {
			errs = append(errs, fmt.Errorf("mapped instance %s is named %q in the UI, want its object %s", inst, ts.rendered, obj))
		}
		key := fmt.Sprintf("converted-batch/%s/%d.jsonl", r.runID, i)
		wantURLs = append(wantURLs, "s3://"+bucket+"/"+key)
		var res struct {
			URLs []string `json:"urls"`
		}
		if err := e.api.xcom(ctx, r, inst, "return_value", &res); err != nil {
			errs = append(errs, err)
		} else if want := wantURLs[i : i+1]; !reflect.DeepEqual(res.URLs, want) {
			errs = append(errs, fmt.Errorf("%s returned urls %v, want %v", inst, res.URLs, want))
		}
		src, err := e.store.get(ctx, strings.TrimPrefix(obj, "s3://"+bucket+"/"))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		in, err := parseOrders(src)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", obj, err))
			continue
		}
		got, err := e.store.get(ctx, key)
		if err != nil {
			errs = append(errs, err)
		} else if n := strings.Count(string(got), "\n"); n != len(in.rows) || !strings.Contains(string(got), `"order_id":"`+in.rows[0][0]+`"`) {
			errs = append(errs, fmt.Errorf("%s has %d lines, want its own object's %d orders (%s first): %q", key, n, len(in.rows), in.rows[0][0], got))
		}
	}
	if _, ok := r.tasks[instanceKey("convert", len(listed))]; ok {
		errs = append(errs, fmt.Errorf("convert has an instance %d, past list_objects' %d objects", len(listed), len(listed)))
	}
	var summarized []string
	if err := e.api.xcom(ctx, r, "summarize", "return_value", &summarized); err != nil {
		errs = append(errs, err)
	} else if !reflect.DeepEqual(summarized, wantURLs) {
		errs = append(errs, fmt.Errorf("summarize (Python) returned %v, want every instance's url in map-index order, %v", summarized, wantURLs))
	}
	if n := len(e.modal.createdFor(r.scenario.dagID, r.runID)); n != len(listed) {
		errs = append(errs, fmt.Errorf("the fake Modal server created %d sandboxes for the run, want one per object (%d)", n, len(listed)))
	}
	return append(errs, noPartials(ctx, e, "converted-batch/")...)
}

func checkPipeline(ctx context.Context, e *checkEnv, r *dagRun) []error {
	errs := allSucceeded(r, "provision", "run", "collect")
	in, err := parseOrders(e.store.input)
	if err != nil {
		return append(errs, err)
	}
	id := provisioned(ctx, e, r, &errs)
	var rec struct {
		Backend string `json:"backend"`
		ID      string `json:"id"`
	}
	if err := e.api.xcom(ctx, r, "provision", "sandbox", &rec); err != nil {
		errs = append(errs, err)
	} else if rec.Backend != "modal" || rec.ID != id {
		errs = append(errs, fmt.Errorf("provision's sandbox record is %+v, want backend modal and id %q", rec, id))
	}
	var res struct {
		ExitCode   *int   `json:"exit_code"`
		OutputTail string `json:"output_tail"`
	}
	if err := e.api.xcom(ctx, r, "run", "return_value", &res); err != nil {
		errs = append(errs, err)
	} else {
		if res.ExitCode == nil || *res.ExitCode != 0 {
			errs = append(errs, fmt.Errorf("run returned exit_code %v, want 0", res.ExitCode))
		}
		if want := fmt.Sprintf("totalled %d customers", len(in.totals)); !strings.Contains(res.OutputTail, want) {
			errs = append(errs, fmt.Errorf("run's output_tail %q lacks %q", res.OutputTail, want))
		}
	}
	key := "pipeline/" + r.runID + "/totals.csv"
	var urls []string
	if err := e.api.xcom(ctx, r, "collect", "return_value", &urls); err != nil {
		errs = append(errs, err)
	} else if want := []string{"s3://" + bucket + "/" + key}; !reflect.DeepEqual(urls, want) {
		errs = append(errs, fmt.Errorf("collect returned %v, want %v", urls, want))
	}
	if got, err := e.store.get(ctx, key); err != nil {
		errs = append(errs, err)
	} else if want := totalsCSV(in); string(got) != want {
		errs = append(errs, fmt.Errorf("s3://%s/%s is %q, want %q", bucket, key, got, want))
	}
	errs = append(errs, noPartials(ctx, e, "pipeline/")...)
	return append(errs, noSandboxLeft(ctx, e, r, id)...)
}

// totalsCSV is the totals.csv the pipeline's first command writes: one
// "customer,total" line per customer, sorted.
func totalsCSV(in orders) string {
	var lines []string
	for c, v := range in.totals {
		lines = append(lines, fmt.Sprintf("%s,%.2f\n", c, v))
	}
	sort.Strings(lines)
	return strings.Join(lines, "")
}

// pipelineSecondCommand is the second of run's commands in
// examples/sandbox_pipeline/bundle.yaml, the one the _run_fails run has the
// fake fail (after the first wrote totals.csv).
const pipelineSecondCommand = `echo "totalled $(wc -l < totals.csv) customers"`

// checkPipelineRunFails: run failed on its second command, which the fake
// ended (so the failure is the one injected, in this run's sandbox); the
// run is failed although collect succeeded, because collect is a teardown
// (under trigger rule all_done, collect was the only leaf and this run
// ended success); collect still exported what run's first command wrote
// and destroyed the sandbox.
func checkPipelineRunFails(ctx context.Context, e *checkEnv, r *dagRun) []error {
	var errs []error
	for task, want := range map[string]string{"provision": "success", "run": "failed", "collect": "success"} {
		if got := r.tasks[task].state; got != want {
			errs = append(errs, fmt.Errorf("task %s is %q, want %s", task, got, want))
		}
	}
	id := provisioned(ctx, e, r, &errs)
	var hit int
	for _, a := range e.modal.failedIn(id) {
		if strings.Contains(strings.Join(a, " "), pipelineSecondCommand) {
			hit++
		}
	}
	if hit != 1 {
		errs = append(errs, fmt.Errorf("the fake Modal server failed %d runs of %q in sandbox %s, want 1: the run did not fail where the test made it", hit, pipelineSecondCommand, id))
	}
	errs = append(errs, logSays(ctx, e, r, "run", "exited with code 1")...)
	in, err := parseOrders(e.store.input)
	if err != nil {
		return append(errs, err)
	}
	key := "pipeline/" + r.runID + "/totals.csv"
	var urls []string
	if err := e.api.xcom(ctx, r, "collect", "return_value", &urls); err != nil {
		errs = append(errs, err)
	} else if want := []string{"s3://" + bucket + "/" + key}; !reflect.DeepEqual(urls, want) {
		errs = append(errs, fmt.Errorf("collect returned %v, want %v", urls, want))
	}
	if got, err := e.store.get(ctx, key); err != nil {
		errs = append(errs, err)
	} else if want := totalsCSV(in); string(got) != want {
		errs = append(errs, fmt.Errorf("s3://%s/%s is %q, want the totals run's first command writes, %q", bucket, key, got, want))
	}
	errs = append(errs, noPartials(ctx, e, "pipeline/")...)
	return append(errs, noSandboxLeft(ctx, e, r, id)...)
}

func checkGoTasks(ctx context.Context, e *checkEnv, r *dagRun) []error {
	errs := allSucceeded(r, "fetch_orders", "rank_customers", "publish_ranking", "cleanup")
	errs = append(errs, checkInletTwins(ctx, e, r)...)
	in, err := parseOrders(e.store.input)
	if err != nil {
		return append(errs, err)
	}
	var totals map[string]float64
	if err := e.api.xcom(ctx, r, "fetch_orders", "return_value", &totals); err != nil {
		errs = append(errs, err)
	} else if !sameTotals(totals, in.totals) {
		errs = append(errs, fmt.Errorf("fetch_orders returned %v, want %v", totals, in.totals))
	}
	names := make([]string, 0, len(in.totals))
	for c := range in.totals {
		names = append(names, c)
	}
	sort.Slice(names, func(i, j int) bool { return in.totals[names[i]] > in.totals[names[j]] })
	wantRanking := names[:min(3, len(names))]
	var ranking []string
	if err := e.api.xcom(ctx, r, "rank_customers", "return_value", &ranking); err != nil {
		errs = append(errs, err)
	} else if !reflect.DeepEqual(ranking, wantRanking) {
		errs = append(errs, fmt.Errorf("rank_customers returned %v, want the top three of fetch_orders' totals, %v", ranking, wantRanking))
	}
	rankKey := "reports/" + r.runID + "/ranking.txt" // keyed by run
	wantURL := "s3://" + bucket + "/" + rankKey
	var url string
	if err := e.api.xcom(ctx, r, "publish_ranking", "return_value", &url); err != nil {
		errs = append(errs, err)
	} else if url != wantURL {
		errs = append(errs, fmt.Errorf("publish_ranking returned %q, want %q", url, wantURL))
	}
	if got, err := e.store.get(ctx, rankKey); err != nil {
		errs = append(errs, err)
	} else if want := strings.Join(wantRanking, "\n") + "\n"; string(got) != want {
		errs = append(errs, fmt.Errorf("%s is %q, want %q (rank_customers' ranking)", wantURL, got, want))
	}
	return append(errs, ranOnModal(e, r)...)
}

func sameTotals(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || math.Abs(v-w) > 1e-9 {
			return false
		}
	}
	return true
}

// noPartials fails when a staging object was left under prefix.
func noPartials(ctx context.Context, e *checkEnv, prefix string) []error {
	keys, err := e.store.keys(ctx, prefix)
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, k := range keys {
		if strings.HasSuffix(k, ".partial") {
			errs = append(errs, fmt.Errorf("a staging object was left behind: s3://%s/%s", bucket, k))
		}
	}
	return errs
}

// ranOnModal fails unless the fake Modal server created a sandbox owned by
// this run: the example ran on its shipped backend, not elsewhere.
func ranOnModal(e *checkEnv, r *dagRun) []error {
	if len(e.modal.createdFor(r.scenario.dagID, r.runID)) == 0 {
		return []error{fmt.Errorf("the fake Modal server created no sandbox owned by %s/%s: the run did not use the modal backend it ships with", r.scenario.dagID, r.runID)}
	}
	return nil
}

// noSandboxLeft checks that the run's sandbox was made on Modal and is
// gone, twice: the fake no longer runs it, and our sweep, asking Modal
// through the modal_default connection as an operator would, finds nothing
// it would destroy for this finished run.
func noSandboxLeft(ctx context.Context, e *checkEnv, r *dagRun, id string) []error {
	var errs []error
	if id != "" && !slices.Contains(e.modal.createdFor(r.scenario.dagID, r.runID), id) {
		errs = append(errs, fmt.Errorf("the fake Modal server never created sandbox %s for this run", id))
	}
	for _, s := range e.modal.srv.Sandboxes() {
		if s.ID == id {
			errs = append(errs, fmt.Errorf("sandbox %s still runs on the fake Modal server after collect", id))
		}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.o.workerBin, "sweep", "--backend", "modal", "--conn-id", modalConnID, "--dry-run", "--json",
		"--finished-run", r.scenario.dagID+"/"+r.runID)
	cmd.Env = append(append(os.Environ(), e.modal.env()...), "AIRFLOW_CONN_MODAL_DEFAULT="+e.modal.connection())
	out, err := cmd.Output()
	if err != nil {
		return append(errs, fmt.Errorf("airflow-go-worker sweep --backend modal --dry-run failed: %v%s", err, stderrOf(err)))
	}
	var sw struct {
		Found []struct {
			ID string `json:"id"`
		} `json:"found"`
	}
	if err := json.Unmarshal(out, &sw); err != nil {
		return append(errs, fmt.Errorf("sweep --json printed %q: %v", out, err))
	}
	for _, f := range sw.Found {
		errs = append(errs, fmt.Errorf("sweep would still destroy sandbox %s of this run", f.ID))
	}
	return errs
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return ": " + strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}
