// Command go_tasks is a bundle that mixes its own Go functions with a task
// of the standard catalogue, registered in its own main: the way platform
// engineers write tasks when the catalogue alone is not enough. It
// implements the stub tasks of dag.py (Dag go_tasks_example):
//
//	fetch_orders >> rank_customers >> publish_ranking >> cleanup
//	latest_conversion
//
// fetch_orders reads a CSV from object storage; rank_customers ranks the
// customers inside a throwaway sandbox; publish_ranking writes the result
// back to object storage; cleanup is the catalogue's sweep kind, removing
// any sandbox this run left behind; latest_conversion reads the latest
// event of an asset another Dag updates (bundles.Client's GetAssetEvents,
// Python's inlet_events). Its own tasks are written like the
// catalogue's (func(ctx, tasks.Deps, In)), so they reach connections,
// sandboxes and storage the way the catalogue does, secrets masked.
//
// It links the local and Modal backends and s3:// (its import of
// storage/s3: a bundle links a store only by importing it), and
// has every bundle command (run, pack, inspect, version). Build and pack it
// like any bundle:
//
//	CGO_ENABLED=0 go build -trimpath -o go_tasks ./examples/go_tasks
//	./go_tasks pack
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

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/cli"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/selftest"
	"github.com/airflow-sandbox/airflow-go-worker/catalogue"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	_ "github.com/airflow-sandbox/airflow-go-worker/sandbox/local" // the sandbox backends it links
	_ "github.com/airflow-sandbox/airflow-go-worker/sandbox/modal"
	_ "github.com/airflow-sandbox/airflow-go-worker/storage/s3" // the store its URLs name
	"github.com/airflow-sandbox/airflow-go-worker/tasks"
)

const dagID = "go_tasks_example"

func main() {
	b := bundles.New()
	// The self-test Dag lets an operator check a deployment of this bundle.
	selftest.Register(b)
	b.Register(dagID, "fetch_orders", catalogue.Adapt(fetchOrders), bundles.WithDefaults(map[string]any{
		"orders_url":  "s3://airflow-artifacts/incoming/orders.csv",
		"aws_conn_id": "aws_default",
	}))
	// Values flow through XCom: each task reads its upstream's return_value
	// (WithXCom), which works on Airflow 3.3, where the stub call's
	// arguments are dropped, and on 3.4, where they arrive and win.
	// dag_run.conf sets nothing unless allowed: a run may choose how many
	// customers to rank (top), never where the sandbox runs (backend local
	// would put it on the worker itself) or with which connection.
	b.Register(dagID, "rank_customers", catalogue.Adapt(rankCustomers), bundles.WithDefaults(map[string]any{
		"backend": "modal", "conn_id": "modal_default", "top": 3,
	}), bundles.WithXCom("totals", "fetch_orders"), bundles.AllowConf("top"))
	b.Register(dagID, "publish_ranking", catalogue.Adapt(publishRanking), bundles.WithDefaults(map[string]any{
		// Keyed by run, so concurrent runs never overwrite each other.
		"ranking_url": "s3://airflow-artifacts/reports/{run_id}/ranking.txt",
		"aws_conn_id": "aws_default",
	}), bundles.WithXCom("ranking", "rank_customers"))
	// Any asset's events, as a Python task's inlet_events[asset]: here the
	// latest conversion examples/conversion reported.
	b.Register(dagID, "latest_conversion", latestConversion)
	// The catalogue's sweep, for this run (trigger rule all_done): a
	// rank_customers killed before its cleanup leaves no sandbox behind.
	if err := catalogue.Add(b, dagID, "cleanup", "sweep", map[string]any{
		"backend": "modal", "finished_runs": []any{"{dag_id}/{run_id}"},
	}); err != nil {
		panic(err)
	}
	cli.Main(b)
}

type FetchInput struct {
	OrdersURL string `json:"orders_url"`
	AWSConnID string `json:"aws_conn_id"`
}

// fetchOrders sums the amount column of a customer,amount CSV per customer.
// The map it returns becomes its return_value XCom.
func fetchOrders(ctx context.Context, d tasks.Deps, in FetchInput) (map[string]float64, error) {
	rc, err := tasks.OpenObject(ctx, d, in.OrdersURL, in.AWSConnID)
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
	d.Logger.Info("orders read", "customers", len(totals))
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
	Totals map[string]float64 `json:"totals"`
	Top    int                `json:"top"`
	// backend, conn_id and backend_options, as the catalogue's tasks take.
	tasks.BackendOptions
}

// rankCustomers ranks the customers in a sandbox: untrusted tooling runs
// there, not on the worker. The sandbox lives only for this task.
func rankCustomers(ctx context.Context, d tasks.Deps, in RankInput) ([]string, error) {
	if len(in.Totals) == 0 {
		return nil, errors.New("totals is empty; bind it to fetch_orders' result")
	}
	log := d.Logger
	backend, err := tasks.OpenBackend(ctx, d, in.BackendOptions)
	if err != nil {
		return nil, err
	}
	defer backend.Close() //nolint:errcheck // it only releases the client
	sb, err := backend.Create(ctx, sandbox.Spec{Owner: d.Run.Owner(), Lifetime: 10 * time.Minute})
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
func publishRanking(ctx context.Context, d tasks.Deps, in PublishInput) (string, error) {
	body := strings.Join(in.Ranking, "\n") + "\n"
	url, err := tasks.PutObject(ctx, d, in.RankingURL, strings.NewReader(body), int64(len(body)), in.AWSConnID)
	if err != nil {
		return "", err
	}
	d.Logger.Info("ranking published", "url", url)
	return url, nil
}

// convertedOrders is the asset examples/conversion's convert reports an
// event of when it has written its outputs.
var convertedOrders = bundles.Asset{Name: "converted_orders", URI: "s3://airflow-artifacts/converted"}

// Conversion is an asset event of convertedOrders: the run that wrote it
// and the URLs it wrote.
type Conversion struct {
	SourceDagID  string `json:"source_dag_id"`
	SourceRunID  string `json:"source_run_id"`
	SourceTaskID string `json:"source_task_id"`
	URLs         any    `json:"urls"`
}

// latestConversion returns the latest conversion of the orders (null when
// there was none): any run's event of the asset, not only one that
// triggered this run (that is DagRun.TriggeringAssetEvents).
func latestConversion(ctx context.Context, c bundles.Client) (*Conversion, error) {
	events, err := c.GetAssetEvents(ctx, convertedOrders, 1)
	if err != nil || len(events) == 0 {
		return nil, err
	}
	e := events[len(events)-1]
	return &Conversion{SourceDagID: e.SourceDagID, SourceRunID: e.SourceRunID, SourceTaskID: e.SourceTaskID, URLs: e.Extra["urls"]}, nil
}
