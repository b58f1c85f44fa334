package realsdk_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/makebuild"
)

// PingsEnv sets how many pings of each binary BenchmarkPingUnderAirflow
// forks (default 200).
const PingsEnv = "AIRFLOW_GO_WORKER_BENCH_REALSDK_PINGS"

// BenchmarkPingUnderAirflow forks self-test pings of binaries built as
// make build builds them through Airflow 3.3.2's own ExecutableCoordinator
// and supervisor, interleaved, and reports how long each took end to end
// (execute_task: fork, connect and its ownership check, StartupDetails,
// SetXCom, SucceedTask, exit, final state): the median, p99 and maximum,
// how many took over a second, and how often the supervisor waited with
// every socket at EOF before it could see the exit (each such wait sleeps
// min_heartbeat_interval, 5 s). The Execution API is the harness's
// in-memory stand-in, so the times are the coordinator's and the bundle's.
func BenchmarkPingUnderAirflow(b *testing.B) {
	n := 200
	if v := os.Getenv(PingsEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("%s=%q: give a positive number of pings", PingsEnv, v)
		}
	}
	subjects := []struct{ name, pkg, root string }{
		{name: "standard", pkg: "../../cmd/airflow-go-worker"},
		{name: "plain_bundle", pkg: "../startup/internal/plainbundle"},
	}
	dir := b.TempDir()
	for i := range subjects {
		s := &subjects[i]
		exe := filepath.Join(dir, s.name)
		makebuild.Build{Pkg: s.pkg}.Must(b, exe)
		s.root = filepath.Join(dir, s.name+"-root")
		if err := os.Mkdir(s.root, 0o755); err != nil {
			b.Fatal(err)
		}
		pack(b, s.root, s.name+".bundle", exe)
	}
	// Round 0 warms the page cache and the harness up and is not counted;
	// each round after runs every binary once, the order alternating.
	var cases []tcase
	for r := 0; r <= n; r++ {
		for i := range subjects {
			s := subjects[i]
			if r%2 == 1 {
				s = subjects[len(subjects)-1-i]
			}
			cases = append(cases, tcase{Name: fmt.Sprintf("%s/%d", s.name, r), Roots: []string{s.root}, DagID: selftestDag, TaskID: "ping", MaxTries: 1})
		}
	}
	results := runCases(b, cases)
	for _, s := range subjects {
		var took []time.Duration
		idle, over := 0, 0
		for r := 1; r <= n; r++ {
			res := results[fmt.Sprintf("%s/%d", s.name, r)]
			if res.ErrorType != "" || res.ExitCode == nil || *res.ExitCode != 0 || res.FinalState != "success" {
				b.Fatalf("%s: ping ended %q, exit code %v, %s %s", res.Name, res.FinalState, res.ExitCode, res.ErrorType, res.Error)
			}
			d := time.Duration(res.Seconds * float64(time.Second))
			took = append(took, d)
			if d > time.Second {
				over++
			}
			idle += res.IdleWaits
		}
		slices.Sort(took)
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		b.Run(s.name, func(b *testing.B) {
			for b.Loop() {
			}
			b.ReportMetric(float64(took[len(took)/2]), "ns/op")
			b.ReportMetric(ms(took[len(took)/2]), "median-ms")
			b.ReportMetric(ms(took[(len(took)*99+99)/100-1]), "p99-ms")
			b.ReportMetric(ms(took[len(took)-1]), "max-ms")
			b.ReportMetric(float64(over), "over-1s")
			b.ReportMetric(float64(idle), "idle-waits")
			b.ReportMetric(float64(n), "pings")
		})
	}
}
