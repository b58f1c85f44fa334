// Command go_tasks is a bundle whose tasks are ordinary Go functions,
// registered in its own main: the way platform engineers write tasks when the
// standard bundle's catalogue is not enough. It implements the stub tasks of
// dag.py (Dag go_tasks_example):
//
//	fetch_orders >> rank_customers >> publish_ranking
//
// fetch_orders reads a CSV from object storage; rank_customers ranks the
// customers inside a throwaway sandbox (using the catalogue's backends from
// Go); publish_ranking writes the result back to object storage.
//
// Build and pack it like any bundle:
//
//	go build -o go_tasks ./examples/go_tasks
//	airflow-go-worker pack --executable go_tasks
package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/selftest"
	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	_ "github.com/airflow-sandbox/airflow-go-worker/sandbox/local" // the sandbox backends rank_customers may use
	_ "github.com/airflow-sandbox/airflow-go-worker/sandbox/modal"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
	"github.com/airflow-sandbox/airflow-go-worker/tasks"
)

const dagID = "go_tasks_example"

func main() {
	b := bundles.New()
	// The self-test Dag lets an operator check a deployment of this bundle.
	selftest.Register(b)
	b.Register(dagID, "fetch_orders", fetchOrders, bundles.WithDefaults(map[string]any{
		"orders_url":  "s3://airflow-artifacts/incoming/orders.csv",
		"aws_conn_id": "aws_default",
	}))
	// Values flow through XCom: each task reads its upstream's return_value
	// (WithXCom), which works on Airflow 3.3, where the stub call's
	// arguments are dropped, and on 3.4, where they arrive and win.
	// dag_run.conf sets nothing unless allowed: a run may move the ranking
	// onto the worker's local backend (its command is fixed) and choose top.
	b.Register(dagID, "rank_customers", rankCustomers, bundles.WithDefaults(map[string]any{
		"backend": "modal", "conn_id": "modal_default", "top": 3,
	}), bundles.WithXCom("totals", "fetch_orders"), bundles.AllowConf("backend", "top"))
	b.Register(dagID, "publish_ranking", publishRanking, bundles.WithDefaults(map[string]any{
		"ranking_url": "s3://airflow-artifacts/reports/ranking.txt",
		"aws_conn_id": "aws_default",
	}), bundles.WithXCom("ranking", "rank_customers"))
	bundles.Main(b)
}

// awsConfig reads an aws connection for package storage; "" means the
// default AWS credential chain.
func awsConfig(ctx context.Context, c bundles.ConnectionGetter, connID string) (*connections.AWSConfig, error) {
	if connID == "" {
		return nil, nil
	}
	conn, err := c.GetConnection(ctx, connID)
	if err != nil {
		return nil, err
	}
	cfg, err := connections.AWSFromConnection(conn)
	return &cfg, err
}

type FetchInput struct {
	OrdersURL string `json:"orders_url"`
	AWSConnID string `json:"aws_conn_id"`
}

// fetchOrders sums the amount column of a customer,amount CSV per customer.
// The map it returns becomes its return_value XCom.
func fetchOrders(ctx context.Context, c bundles.ConnectionGetter, log hclog.Logger, in FetchInput) (map[string]float64, error) {
	aws, err := awsConfig(ctx, c, in.AWSConnID)
	if err != nil {
		return nil, err
	}
	rc, err := storage.Open(ctx, in.OrdersURL, storage.Options{AWS: aws, Logger: log})
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	r := csv.NewReader(rc)
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: reading the header: %w", in.OrdersURL, err)
	}
	cust, amt := indexOf(header, "customer"), indexOf(header, "amount")
	if cust < 0 || amt < 0 {
		return nil, fmt.Errorf("%s: the header %v needs customer and amount columns", in.OrdersURL, header)
	}
	totals := map[string]float64{}
	for line := 2; ; line++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", in.OrdersURL, err)
		}
		v, err := strconv.ParseFloat(rec[amt], 64)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: amount %q is not a number", in.OrdersURL, line, rec[amt])
		}
		totals[rec[cust]] += v
	}
	log.Info("orders read", "customers", len(totals))
	return totals, nil
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if strings.TrimSpace(v) == s {
			return i
		}
	}
	return -1
}

type RankInput struct {
	Totals  map[string]float64 `json:"totals"`
	Top     int                `json:"top"`
	Backend string             `json:"backend"`
	ConnID  string             `json:"conn_id"`
}

// rankCustomers ranks the customers in a sandbox: untrusted tooling runs
// there, not on the worker. The sandbox lives only for this task.
func rankCustomers(ctx context.Context, ti bundles.TaskInstance, af tasks.Airflow, log hclog.Logger, in RankInput) ([]string, error) {
	if len(in.Totals) == 0 {
		return nil, errors.New("totals is empty; bind it to fetch_orders' result")
	}
	d := tasks.Deps{Airflow: af, Logger: log, Run: tasks.Run{DagID: ti.DagID, RunID: ti.RunID, TaskID: ti.TaskID, MapIndex: ti.MapIndex}}
	backend, err := tasks.OpenBackend(ctx, d, tasks.BackendOptions{Backend: in.Backend, ConnID: in.ConnID})
	if err != nil {
		return nil, err
	}
	defer backend.Close()
	sb, err := backend.Create(ctx, sandbox.Spec{Owner: d.Run.Owner(), Timeout: 10 * time.Minute})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := sb.Destroy(context.WithoutCancel(ctx)); err != nil {
			log.Warn("could not destroy the sandbox; its lifetime will reclaim it", "id", sb.ID(), "error", err)
		}
	}()
	var table bytes.Buffer
	names := make([]string, 0, len(in.Totals))
	for name := range in.Totals {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(&table, "%s,%g\n", name, in.Totals[name])
	}
	if err := sb.WriteFile(ctx, "totals.csv", &table, 0); err != nil {
		return nil, err
	}
	top := in.Top
	if top <= 0 {
		top = 3
	}
	var out bytes.Buffer
	res, err := sb.Exec(ctx, fmt.Sprintf("sort -t, -k2,2 -g -r totals.csv | head -n %d | cut -d, -f1", top),
		sandbox.ExecOptions{Stdout: &out, Stderr: &out, Timeout: time.Minute})
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("ranking failed with exit code %d: %s", res.ExitCode, out.String())
	}
	ranking := strings.Fields(out.String())
	log.Info("ranked", "top", ranking)
	return ranking, nil
}

type PublishInput struct {
	Ranking    []string `json:"ranking"`
	RankingURL string   `json:"ranking_url"`
	AWSConnID  string   `json:"aws_conn_id"`
}

// publishRanking writes the ranking, one customer a line, to object storage
// and returns where it landed.
func publishRanking(ctx context.Context, c bundles.ConnectionGetter, log hclog.Logger, in PublishInput) (string, error) {
	aws, err := awsConfig(ctx, c, in.AWSConnID)
	if err != nil {
		return "", err
	}
	body := strings.Join(in.Ranking, "\n") + "\n"
	w, err := storage.Put(ctx, in.RankingURL, strings.NewReader(body), storage.Options{AWS: aws, Logger: log, SHA256: true})
	if err != nil {
		return "", err
	}
	log.Info("ranking published", "url", w.URL, "sha256", w.SHA256)
	return w.URL, nil
}
