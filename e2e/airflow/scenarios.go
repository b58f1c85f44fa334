package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// scenario is one example Dag: how it is packed, how it is triggered, and
// what must be true once its run succeeded.
type scenario struct {
	dagID   string
	example string         // examples/<example>: dag.py plus bundle.yaml or main.go
	goMain  bool           // packed from its own Go main (go_tasks), not a bundle config
	conf    map[string]any // the trigger's dag_run.conf
	proves  string         // what a passing check shows
	check   func(ctx context.Context, e *checkEnv, r *dagRun) []error
}

// checkEnv is what the checks read: Airflow's REST API, the S3 server, and
// the worker's local sandbox root.
type checkEnv struct {
	api   *apiClient
	store *store
	w     *workdir
	o     options
}

var scenarios = []*scenario{
	{
		dagID: "sandbox_conversion", example: "conversion",
		proves: "convert staged orders.csv from S3, converted it in a local sandbox and wrote both outputs to S3; announce got its XCom",
		check:  checkConversion,
	},
}

func dagIDs() []string {
	var ids []string
	for _, s := range scenarios {
		ids = append(ids, s.dagID)
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

// triggerAll starts one run of every scenario's Dag.
func triggerAll(ctx context.Context, api *apiClient, list []*scenario) ([]*dagRun, error) {
	runID := "airflow_e2e__" + time.Now().UTC().Format("20060102T150405Z")
	var runs []*dagRun
	for _, s := range list {
		r := &dagRun{scenario: s, runID: runID, state: "queued"}
		if err := api.trigger(ctx, s.dagID, runID, s.conf); err != nil {
			return runs, fmt.Errorf("triggering %s: %w", s.dagID, err)
		}
		conf, _ := json.Marshal(orEmpty(s.conf))
		info("%s %s conf=%s", s.dagID, runID, conf)
		runs = append(runs, r)
	}
	return runs, nil
}

// waitRuns polls the runs until each is success or failed, printing every
// task state change and, every 30 s, where things stand. Past timeout it
// stops waiting and leaves the runs in the state they reached. It returns
// an error only when Airflow itself died or the driver was interrupted.
func waitRuns(ctx context.Context, api *apiClient, runs []*dagRun, timeout time.Duration, alive func() error) error {
	start := time.Now()
	deadline := start.Add(timeout)
	nextNote := start.Add(30 * time.Second)
	seen := map[string]string{}
	for {
		pending := 0
		for _, r := range runs {
			if r.state == "success" || r.state == "failed" {
				continue
			}
			if err := api.runState(ctx, r); err != nil {
				return fmt.Errorf("reading the state of %s %s: %w", r.scenario.dagID, r.runID, err)
			}
			for _, id := range r.taskIDs() {
				key := r.scenario.dagID + "." + id
				if st := r.tasks[id].state; seen[key] != st {
					seen[key] = st
					info("%5s  %s.%s: %s", time.Since(start).Round(time.Second), r.scenario.dagID, id, st)
				}
			}
			if r.state != "success" && r.state != "failed" {
				pending++
			} else {
				info("%5s  %s run %s", time.Since(start).Round(time.Second), r.scenario.dagID, r.state)
			}
		}
		if pending == 0 {
			return nil
		}
		if err := alive(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			fmt.Printf("    gave up waiting after %s: %d runs have not finished\n", timeout, pending)
			return nil
		}
		if time.Now().After(nextNote) {
			info("%5s  still waiting for %d runs", time.Since(start).Round(time.Second), pending)
			nextNote = time.Now().Add(30 * time.Second)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
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
	wantURLs := []string{"s3://" + bucket + "/converted/orders.jsonl", "s3://" + bucket + "/converted/orders.jsonl.gz"}
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

	jsonl, err := e.store.get(ctx, "converted/orders.jsonl")
	if err != nil {
		return append(errs, err)
	}
	lines := strings.Split(strings.TrimRight(string(jsonl), "\n"), "\n")
	if len(lines) != len(in.rows) {
		errs = append(errs, fmt.Errorf("converted/orders.jsonl has %d lines, want one per order (%d)", len(lines), len(in.rows)))
	}
	for i, l := range lines[:min(len(lines), len(in.rows))] {
		var got map[string]string
		if err := json.Unmarshal([]byte(l), &got); err != nil {
			errs = append(errs, fmt.Errorf("converted/orders.jsonl line %d is not a JSON object of strings: %v: %s", i+1, err, l))
			continue
		}
		want := map[string]string{}
		for j, h := range in.header {
			want[h] = in.rows[i][j]
		}
		if !reflect.DeepEqual(got, want) {
			errs = append(errs, fmt.Errorf("converted/orders.jsonl line %d is %v, want %v", i+1, got, want))
		}
	}
	gz, err := e.store.get(ctx, "converted/orders.jsonl.gz")
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
		errs = append(errs, fmt.Errorf("converted/orders.jsonl.gz: %v", err))
	}
	return append(errs, noPartials(ctx, e, "converted/")...)
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

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}
