package catalogue

import (
	"fmt"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/taskinfo"
)

// manyDags is a config of n Dags with two tasks each.
func manyDags(n int) []byte {
	var b strings.Builder
	b.WriteString("dags:\n")
	for i := range n {
		fmt.Fprintf(&b, "  dag_%06d:\n    tasks:\n      provision: {kind: provision}\n      collect: {kind: collect}\n", i)
	}
	return []byte(b.String())
}

// Issue 10, hole 9: loading looked every Dag up again by id, quadratic in
// the number of Dags (100k took over a minute). The speed is measured by
// BenchmarkLoadBundleConfig; this checks 100k Dags load, all of them, in
// file order.
func TestLoadBundleConfigWithManyDags(t *testing.T) {
	const n = 100_000
	b := bundles.New()
	if err := Load(b, manyDags(n), "big.yaml"); err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, t := range taskinfo.Describe(b) {
		refs = append(refs, t.DagID+"."+t.TaskID)
	}
	if len(refs) != 2*n || refs[0] != "dag_000000.provision" || refs[2*n-1] != "dag_099999.collect" {
		t.Fatalf("registered %d tasks, first %v, last %v", len(refs), refs[0], refs[len(refs)-1])
	}
}

// Issue 10, hole 9: a 300 MB config took so long to parse that the task
// ended as "did not connect within 10s". An oversized config is now refused
// at once, saying so.
func TestOversizedBundleConfigIsRefused(t *testing.T) {
	data := append([]byte("dags: {d: {tasks: {t: {kind: run}}}}\n#"), strings.Repeat("x", maxBundleConfigSize)...)
	err := Load(bundles.New(), data, "huge.yaml")
	if err == nil || !strings.Contains(err.Error(), "huge.yaml: the bundle config is") || !strings.Contains(err.Error(), "16 MiB") {
		t.Fatalf("got %v", err)
	}
}

func BenchmarkLoadBundleConfig(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		data := manyDags(n)
		b.Run(fmt.Sprintf("dags=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if err := Load(bundles.New(), data, "big.yaml"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
