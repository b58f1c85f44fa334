package bundles

import (
	"bytes"
	"context"
	"runtime"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/onep"
	"github.com/airflow-sandbox/airflow-go-worker/internal/exitorder"
	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"
)

// defaultProcs is the runtime's own GOMAXPROCS for this machine, and puts
// it back for the tests that follow.
func defaultProcs(t *testing.T) int {
	t.Helper()
	runtime.SetDefaultGOMAXPROCS()
	t.Cleanup(runtime.SetDefaultGOMAXPROCS)
	return runtime.GOMAXPROCS(0)
}

// lowered is a process as package onep starts one: on one P.
func lowered() *oneP {
	runtime.GOMAXPROCS(1)
	return newOneP()
}

// A forked task runs on one P, and once it has run for the delay it is
// back on the runtime's default.
func TestTaskStartsOnOnePAndGetsTheDefaultBack(t *testing.T) {
	def := defaultProcs(t)
	seen := 0
	b := New()
	b.Register("d", "t", func() error { seen = runtime.GOMAXPROCS(0); return nil })
	p := lowered()
	s := runFake(t, b, startupFrame(t, "d", "t", nil), nil, serveConfig{oneP: p})
	if s.err != nil || s.terminal == nil {
		t.Fatalf("serve: %v, terminal %v", s.err, s.terminal)
	}
	if seen != 1 {
		t.Errorf("the task ran with GOMAXPROCS %d, want 1", seen)
	}
	// Only the timer runTask armed can restore it here.
	deadline.Wait(t, "the runtime's default GOMAXPROCS to be restored after the task started", p.restored)
	if got := runtime.GOMAXPROCS(0); got != def {
		t.Errorf("after the delay GOMAXPROCS = %d, want the default %d", got, def)
	}
}

// A task that sets GOMAXPROCS itself keeps its value.
func TestRestoreKeepsTheTasksOwnGOMAXPROCS(t *testing.T) {
	defaultProcs(t)
	p := lowered()
	runtime.GOMAXPROCS(3)
	p.restoreAfter(0)
	<-p.restored
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Errorf("GOMAXPROCS = %d after restore, want the task's own 3", got)
	}
}

// A process that started on one P and goes on after serving (a test, an
// embedding program) is not left on one P when serving ends before any
// task ran.
func TestRunRestoresWhenNoTaskRan(t *testing.T) {
	def := defaultProcs(t)
	runtime.GOMAXPROCS(1)
	startedLowered = func() bool { return true }
	t.Cleanup(func() { startedLowered = onep.Lowered })
	if code := New().Run(context.Background(), []string{"--comm=127.0.0.1:1", "--logs=127.0.0.1:1"}, &bytes.Buffer{}, &bytes.Buffer{}); code != exitorder.Failure {
		t.Fatalf("dial failure: exit %d, want %d", code, exitorder.Failure)
	}
	if got := runtime.GOMAXPROCS(0); got != def {
		t.Errorf("GOMAXPROCS = %d after Run, want the default %d", got, def)
	}
}
