// Command testbundle is a bundle for the supervisor's end-to-end tests: the
// shipped selftest Dag plus tasks that misbehave on purpose.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/selftest"
	"github.com/airflow-sandbox/airflow-go-worker/connections"
)

// multiLineSecret stands for a PEM key: masked whole, printed line by line.
const multiLineSecret = "-----BEGIN TEST KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\nVJTUt9Us8cKjMzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvD\n-----END TEST KEY-----"

type floodIn struct {
	StdoutMiB int `json:"stdout_mib"`
	LogMiB    int `json:"log_mib"`
}

type echoIn struct {
	Msg   string `json:"msg"`
	Times int    `json:"times"`
}

type runStatesIn struct {
	Runs []string `json:"runs"`
}

func askRunStates(ctx context.Context, c bundles.Client, runs []string) map[string]string {
	out := map[string]string{}
	for _, r := range runs {
		dag, run, _ := strings.Cut(r, "/")
		st, err := c.GetDagRunState(ctx, dag, run)
		switch {
		case errors.Is(err, bundles.ErrDagRunNotFound):
			st = "not found"
		case err != nil:
			st = "error: " + err.Error()
		}
		out[r] = st
	}
	return out
}

type urlIn struct {
	URL string `json:"url"`
}

type resultsIn struct {
	Results []string `json:"results"`
}

// registerDataModel adds a Dag of assets and mapping: list feeds a
// mapped convert, which writes an asset; gather collects its results;
// consume reads an asset event's url.
func registerDataModel(b *bundles.Bundle) {
	// poll defers twice, counting in its state, then returns what it saw.
	b.Register("deferral", "poll", func(ti bundles.TaskInstance) (string, error) {
		var polls int
		if ti.Resumed != "" {
			if err := json.Unmarshal([]byte(ti.Resumed), &polls); err != nil {
				return "", err
			}
		}
		if polls < 2 {
			return "", bundles.Defer(time.Hour, polls+1)
		}
		return fmt.Sprintf("polled %d times, %s", polls, ti.ID), nil
	}, bundles.WithExecutionTimeout(24*time.Hour))
	out := bundles.Asset{URI: "file:///converted/"}
	b.Register("assets", "list", func() ([]string, error) { return []string{"a.csv", "b.csv", "c.csv"}, nil })
	b.Register("assets", "convert", func(o *bundles.Outlets, ti bundles.TaskInstance, in urlIn) (string, error) {
		url := "file:///converted/" + strings.TrimSuffix(in.URL, ".csv") + ".jsonl"
		return url, o.SetExtra("url", url)
	}, bundles.WithExpandXCom("url", "list"), bundles.WithOutlets(out), bundles.WithMapIndexTemplate("{url}"))
	b.Register("assets", "gather", func(in resultsIn) ([]string, error) { return in.Results, nil }, bundles.WithMappedXCom("results", "convert"))
	b.Register("assets", "consume", func(in urlIn) (string, error) { return "read " + in.URL, nil }, bundles.WithAssetEvent("url", out.URI, "extra.url"))
	// inlets reads the latest event of the asset, whatever triggered the
	// run (Python's inlet_events).
	b.Register("assets", "inlets", func(ctx context.Context, c bundles.Client) ([]string, error) {
		events, err := c.GetAssetEvents(ctx, out, 2)
		var urls []string
		for _, e := range events {
			urls = append(urls, fmt.Sprint(e.Extra["url"]))
		}
		return urls, err
	})
	// A branch over its two downstream tasks, choosing the conf's way.
	b.Register("branch", "choose", func(in wayIn) (string, error) { return in.Way, nil },
		bundles.WithBranch("left", "right"), bundles.AllowConf("way"), bundles.WithDefaults(map[string]any{"way": "left"}))
	b.Register("branch", "left", func() (string, error) { return "went left", nil })
	b.Register("branch", "right", func() (string, error) { return "went right", nil })
}

type wayIn struct {
	Way string `json:"way"`
}

func main() {
	b := bundles.New()
	selftest.Register(b)
	registerDataModel(b)
	b.Register("e2e", "panic", func() error { panic("deliberate panic") })
	// procs reports GOMAXPROCS as the task starts, and once the runtime
	// has given it the default back (or its context ends).
	b.Register("e2e", "procs", func(ctx context.Context) (map[string]any, error) {
		start := runtime.GOMAXPROCS(0)
		later := start
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for later == 1 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-tick.C:
				later = runtime.GOMAXPROCS(0)
			}
		}
		return map[string]any{"at_start": start, "later": later}, nil
	})
	b.Register("e2e", "echo", func(in echoIn) (map[string]any, error) {
		return map[string]any{"msg": in.Msg, "times": in.Times}, nil
	}, bundles.WithDefaults(map[string]any{"times": 1}), bundles.AllowConf("times"))
	// run_states reports what GetDagRunState answers for each run
	// ("<dag_id>/<run_id>"): its state, "not found", or the error.
	b.Register("e2e", "run_states", func(ctx context.Context, c bundles.Client, in runStatesIn) (map[string]string, error) {
		return askRunStates(ctx, c, in.Runs), nil
	}, bundles.AllowConf("runs"))
	b.Register("e2e", "leak", func(ctx context.Context, c bundles.Client, log hclog.Logger) error {
		if err := c.MaskSecret(ctx, "s3cr3t-value", "demo"); err != nil {
			return err
		}
		log.Info("about to print s3cr3t-value")
		fmt.Println("stdout has s3cr3t-value too")
		// Issue 19, hole 4: invisible bytes inside it, which a terminal
		// or the Airflow UI do not show.
		log.Info("reset inside s3cr\x1b[0m3t-value")
		fmt.Println("NUL inside s3cr\x003t-value")
		fmt.Fprintln(os.Stderr, "CR inside s3cr\r3t-value")
		return nil
	})
	b.Register("e2e", "leak_multiline", func(ctx context.Context, c bundles.Client, log hclog.Logger) error {
		if err := c.MaskSecret(ctx, multiLineSecret, "key"); err != nil {
			return err
		}
		for _, line := range strings.Split(multiLineSecret, "\n") {
			log.Info("key line " + line)
		}
		fmt.Println(multiLineSecret)
		return nil
	})
	// flood prints and logs lines of 1 KiB, for the supervisor's memory bound.
	b.Register("e2e", "flood", func(log hclog.Logger, in floodIn) error {
		line := strings.Repeat("0123456789abcdef", 64)
		w := bufio.NewWriterSize(os.Stdout, 1<<20)
		for i := 0; i < in.StdoutMiB<<10; i++ {
			_, _ = w.WriteString(line[:len(line)-1]) // bufio: the error shows in Flush
			_ = w.WriteByte('\n')
		}
		if err := w.Flush(); err != nil {
			return err
		}
		for i := 0; i < in.LogMiB<<10; i++ {
			log.Info(line)
		}
		return nil
	}, bundles.AllowConf("stdout_mib", "log_mib"))
	b.Register("e2e", "print_password", func(ctx context.Context, c connectionGetter) error {
		conn, err := c.GetConnection(ctx, "db")
		if err != nil {
			return err
		}
		fmt.Println("stdout shows", conn.Password)
		return nil
	})
	b.Register("e2e", "stubborn", func(log hclog.Logger) error {
		log.Info("stubborn task started; it ignores cancellation")
		select {}
	})
	bundles.Main(b)
}

// connectionGetter is the narrow interface print_password asks for: the
// runtime hands any interface its client satisfies.
type connectionGetter interface {
	GetConnection(ctx context.Context, connID string) (connections.Connection, error)
}
