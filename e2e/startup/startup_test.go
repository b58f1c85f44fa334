// Package startup_test measures what a bundle costs to start, since Airflow
// forks it once per task instance: CPU time (user+sys, from the child's
// rusage) of --airflow-metadata and of a whole self-test task forked by the
// local supervisor (with its exit holder's), peak RSS of --airflow-metadata, binary size and the
// number of package initialisers, each beside the same figure for a trivial
// Go binary built in the same run.
//
// Targets (issue 11): a bundle of plain Go tasks within 2.5x of the trivial
// binary, the standard airflow-go-worker binary (its default build: local
// backend and file://) within 4x. The rows after it are the standard
// binary built with one extra (make build EXTRAS=s3, EXTRAS=modal, ...) and
// with every extra (EXTRAS=all), to show what each costs every task.
package startup_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/selftest"
	"github.com/airflow-sandbox/airflow-go-worker/bundles/supervisor"
	"github.com/airflow-sandbox/airflow-go-worker/testing/makebuild"
)

// RoundsEnv sets how many interleaved rounds are measured (default 81).
const RoundsEnv = "AIRFLOW_GO_WORKER_BENCH_STARTUP_ROUNDS"

// subject is one binary under measurement.
type subject struct {
	name string
	pkg  string // package to build; "" = the trivial program
	tags string // go build -tags
	cgo  bool   // build with CGO_ENABLED=1, as go build does by default
	bin  string
	task bool // speaks the coordinator protocol (runs the self-test ping)

	metaCPU, taskCPU []time.Duration
	holdCPU          []time.Duration // the exit holder's part of taskCPU
	rss              []int64         // peak of --airflow-metadata, bytes
	size             int64
	inits            int
}

const trivialMain = `package main

import "os"

func main() { os.Stdout.WriteString("dags: {}\n") }
`

// build compiles every subject the way `make build` does (package
// makebuild: statically, written as pack writes a bundle). With cgo,
// package net alone makes a binary load libc through the dynamic linker
// and start its threads through pthreads, about 1.5 ms of CPU at every
// start (the cgo row). The trivial binary is static either way.
func build(b *testing.B, subjects []*subject) {
	dir := b.TempDir()
	for _, s := range subjects {
		s.bin = filepath.Join(dir, s.name)
		mb := makebuild.Build{Pkg: s.pkg, Cgo: s.cgo}
		if s.tags != "" {
			mb.Tags = []string{s.tags}
		}
		if s.pkg == "" {
			src := filepath.Join(dir, "trivial-src")
			if err := os.MkdirAll(src, 0o755); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module trivial\n\ngo 1.22\n"), 0o644); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(trivialMain), 0o644); err != nil {
				b.Fatal(err)
			}
			mb.Pkg, mb.Dir, mb.Env = ".", src, []string{"GOWORK=off", "GOFLAGS="}
		}
		mb.Must(b, s.bin)
		st, err := os.Stat(s.bin)
		if err != nil {
			b.Fatal(err)
		}
		s.size = st.Size()
	}
}

func cpuOf(ru *syscall.Rusage) time.Duration {
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// metadata runs the binary with --airflow-metadata once.
func (s *subject) metadata(b *testing.B) *syscall.Rusage {
	cmd := exec.Command(s.bin, "--airflow-metadata")
	cmd.Env = []string{}
	cmd.Stdout = io.Discard
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("%s --airflow-metadata: %v\n%s", s.name, err, stderr.Bytes())
	}
	return cmd.ProcessState.SysUsage().(*syscall.Rusage)
}

// countInits counts the package initialisers the runtime runs at start.
func (s *subject) countInits(b *testing.B) {
	cmd := exec.Command(s.bin, "--airflow-metadata")
	cmd.Env = []string{"GODEBUG=inittrace=1"}
	cmd.Stdout = io.Discard
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("%s with inittrace: %v", s.name, err)
	}
	sc := bufio.NewScanner(&stderr)
	for sc.Scan() {
		if bytes.HasPrefix(sc.Bytes(), []byte("init ")) {
			s.inits++
		}
	}
}

// forkToExit runs the self-test ping through the supervisor (the trivial
// binary just runs to its exit) and returns the child's usage. A task
// process ends by starting its exit holder (bundles.Exit), which outlives
// it: holders reports the holder's CPU, which belongs to the task's.
func (s *subject) forkToExit(b *testing.B, sup *supervisor.Supervisor) (usage *syscall.Rusage, holders time.Duration) {
	if !s.task {
		cmd := exec.Command(s.bin)
		cmd.Env = []string{}
		cmd.Stdout = io.Discard
		if err := cmd.Run(); err != nil {
			b.Fatalf("%s: %v", s.name, err)
		}
		return cmd.ProcessState.SysUsage().(*syscall.Rusage), 0
	}
	sup.Executable = s.bin
	res, err := sup.RunTask(context.Background(), supervisor.TaskRequest{DagID: selftest.DagID, TaskID: "ping", RunID: "bench"})
	if err != nil || res.State != supervisor.StateSuccess || res.Usage == nil {
		b.Fatalf("%s: ping ended %s (%v)\n%v", s.name, res.State, err, res.Output)
	}
	return res.Usage, reapHolders(b)
}

// reapHolders waits for the orphans this process has adopted (it is their
// subreaper, see BenchmarkStartup): exit holders, which end right after
// the task process they hold for. It returns their CPU time.
func reapHolders(b *testing.B) time.Duration {
	var cpu time.Duration
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		_, err := syscall.Wait4(-1, &ws, 0, &ru)
		if err == syscall.ECHILD {
			return cpu
		}
		if err != nil {
			b.Fatalf("reaping exit holders: %v", err)
		}
		cpu += cpuOf(&ru)
	}
}

// pairedRatio is the median over rounds of v[i]/base[i]: each round runs
// every binary once, so a ratio within a round cancels what the machine
// did meanwhile (the development VM's host steals up to a quarter of its
// CPU at times), where a ratio of two medians mixes different moments.
func pairedRatio(v, base []time.Duration) float64 {
	r := make([]float64, len(v))
	for i := range v {
		r[i] = float64(v[i]) / float64(base[i])
	}
	slices.Sort(r)
	return r[len(r)/2]
}

func median[T int64 | time.Duration](v []T) T {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func rounds(b *testing.B) int {
	n := 81
	if v := os.Getenv(RoundsEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("%s=%q: give a positive number of rounds", RoundsEnv, v)
		}
	}
	return n
}

const standard = "../../cmd/airflow-go-worker"

// BenchmarkStartup reports one row per binary: medians over interleaved
// rounds (so load on the machine hits every binary alike), the CPU figures
// also as the median of their per-round ratios to the trivial binary's
// (pairedRatio), the others as a ratio of medians.
func BenchmarkStartup(b *testing.B) {
	subjects := []*subject{
		{name: "trivial"},
		{name: "plain_bundle", pkg: "./internal/plainbundle", task: true},
		{name: "plain_bundle_cgo", pkg: "./internal/plainbundle", cgo: true, task: true},
		{name: "go_tasks", pkg: "../../examples/go_tasks", task: true},
		{name: "standard", pkg: standard, task: true},
		{name: "standard+s3", pkg: standard, tags: "store_s3", task: true},
		{name: "standard+modal", pkg: standard, tags: "backend_modal", task: true},
		{name: "standard+opensandbox", pkg: standard, tags: "backend_opensandbox", task: true},
		{name: "standard_full", pkg: standard, tags: "all_extras", task: true},
	}
	build(b, subjects)
	// Adopt the exit holders the task processes leave (bundles.Exit), to
	// count their CPU as the task's; only this benchmark's own children
	// are running meanwhile, so reaping every orphan takes no one else's.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		b.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	sup := &supervisor.Supervisor{Env: []string{}}
	for _, s := range subjects {
		s.countInits(b)
	}
	for range rounds(b) {
		for _, s := range subjects {
			s.metaCPU = append(s.metaCPU, cpuOf(s.metadata(b)))
			usage, holders := s.forkToExit(b, sup)
			s.taskCPU = append(s.taskCPU, cpuOf(usage)+holders)
			s.holdCPU = append(s.holdCPU, holders)
		}
	}
	// Peak RSS barely varies between runs; a few traced runs suffice.
	for range 5 {
		for _, s := range subjects {
			n, err := peakRSS(s.bin, "--airflow-metadata")
			if err != nil {
				b.Fatalf("%s: measuring peak RSS: %v", s.name, err)
			}
			s.rss = append(s.rss, n)
		}
	}
	base := subjects[0]
	ratio := func(a, b float64) float64 { return a / b }
	for _, s := range subjects {
		b.Run(s.name, func(b *testing.B) {
			for b.Loop() {
				s.metadata(b)
			}
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			mib := func(n int64) float64 { return float64(n) / (1 << 20) }
			b.ReportMetric(ms(median(s.metaCPU)), "meta-cpu-ms")
			b.ReportMetric(pairedRatio(s.metaCPU, base.metaCPU), "meta-x")
			b.ReportMetric(ms(median(s.taskCPU)), "task-cpu-ms")
			b.ReportMetric(pairedRatio(s.taskCPU, base.taskCPU), "task-x")
			b.ReportMetric(ms(median(s.holdCPU)), "hold-cpu-ms")
			b.ReportMetric(mib(median(s.rss)), "rss-MiB")
			b.ReportMetric(ratio(mib(median(s.rss)), mib(median(base.rss))), "rss-x")
			b.ReportMetric(mib(s.size), "size-MiB")
			b.ReportMetric(ratio(mib(s.size), mib(base.size)), "size-x")
			b.ReportMetric(float64(s.inits), "inits")
		})
	}
	if testing.Verbose() {
		for _, s := range subjects {
			fmt.Fprintf(os.Stderr, "%s: metadata cpu %v, task cpu %v\n", s.name, median(s.metaCPU), median(s.taskCPU))
		}
	}
}
