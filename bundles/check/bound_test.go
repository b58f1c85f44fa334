package check

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/pyenv"
)

func TestTailWriterKeepsTheEndAndCountsTheRest(t *testing.T) {
	const max = 1000
	w := newTailWriter(max)
	rng := rand.New(rand.NewPCG(5, 6))
	var all strings.Builder
	for i := 0; all.Len() < 200_000; i++ {
		chunk := fmt.Sprintf("line-%d\n", i)
		if rng.IntN(50) == 0 {
			chunk = strings.Repeat("y", 1+rng.IntN(3*max)) // one write past the bound
		}
		all.WriteString(chunk)
		w.Write([]byte(chunk))
		if len(w.buf) > 2*max {
			t.Fatalf("%d bytes held; the bound is %d", len(w.buf), 2*max)
		}
	}
	want := all.String()[all.Len()-max:]
	if got := w.String(); got != want {
		t.Fatalf("kept %q..., want the last %d bytes %q...", got[:20], max, want[:20])
	}
	if kept := int64(len(w.buf)); w.dropped+kept != int64(all.Len()) {
		t.Fatalf("%d dropped + %d kept != %d written", w.dropped, kept, all.Len())
	}
	if got := w.lastLines(3); !strings.HasPrefix(got, fmt.Sprintf("[%d bytes of output before these lines not shown]\n", all.Len()-len(tail(want, 3)))) {
		t.Fatalf("lastLines: %q", got)
	}
}

// dagFile writes a Dag file (Airflow imports only files that mention
// "airflow" and "dag") whose import runs body.
func dagFile(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	src := "# an airflow DAG file\nfrom airflow.sdk import DAG\n" + body
	if err := os.WriteFile(filepath.Join(dir, "dag.py"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Issue 29, item 5: check kept all that the parsed Dag files printed (1
// GiB printed: 4.2 GB RSS). It keeps the last 64 KiB and says how much came
// before.
func TestCheckKeepsOnlyTheEndOfWhatTheParserPrints(t *testing.T) {
	python := pyenv.Python(t)
	const printed = 64 << 20
	dags := dagFile(t, fmt.Sprintf(`import os, sys
line = "noise " * 15 + "\n"
for _ in range(%d // len(line)):
    sys.stdout.write(line)
sys.stdout.write("the last line\n")
sys.stdout.flush()
os._exit(1)
`, printed))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := Run(context.Background(), Options{Dags: []string{dags}, Python: python, Env: airflowEnv(t, "", "")})
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "the last line") {
		t.Fatalf("want the parser's failure with the end of its output, got %v", err)
	}
	if !strings.Contains(err.Error(), "bytes of output before these lines not shown]") || len(err.Error()) > maxParserOutput {
		t.Fatalf("the error should say what it leaves out and stay short (%d bytes):\n%.2000s", len(err.Error()), err)
	}
	// What was printed went through the check, not into its memory.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > printed/4 {
		t.Fatalf("the check allocated %d MiB while the parser printed %d MiB", alloc>>20, printed>>20)
	}
}

// Issue 29, item 5: check had no time bound; a Dag file that blocks at
// import (here on a fifo nobody writes, with a child of its own holding
// the output pipe) kept it waiting for ever.
func TestCheckEndsAParserThatBlocksWhenTimeRunsOut(t *testing.T) {
	python := pyenv.Python(t)
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	dags := dagFile(t, fmt.Sprintf(`import subprocess
subprocess.Popen(["sleep", "3600"])
open(%q).read()
`, fifo))
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	blocked := make(chan *os.File, 1)
	go func() {
		// Opening a fifo to write returns once the Dag has it open to
		// read: from then on the import blocks, as long as this stays open.
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
		}
		blocked <- w
		cancel(&TimeoutError{Timeout: time.Minute})
	}()
	env := append(airflowEnv(t, "", ""), "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT=0") // no alarm of Airflow's own
	done := make(chan error, 1)
	go func() { _, err := readAirflow(ctx, python, []string{dags}, env); done <- err }()
	var err error
	select {
	case err = <-done:
		t.Fatalf("the parser ended before the Dag blocked: %v", err)
	case w := <-blocked:
		defer w.Close()
		err = <-done
	}
	var te *TimeoutError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "did not finish within --timeout 1m0s (Airflow was parsing the Dags)") {
		t.Fatalf("want the time limit named, got %v", err)
	}
}

// The limit reaches Run (and the command's --timeout): a check that cannot
// finish in time ends with an error naming it.
func TestRunHonoursItsTimeout(t *testing.T) {
	python := pyenv.Python(t)
	dags := dagFile(t, "while True:\n    pass\n")
	// Airflow alone takes seconds to import: the limit fires while it parses.
	_, err := Run(context.Background(), Options{Dags: []string{dags}, Python: python, Env: airflowEnv(t, "", ""), Timeout: 100 * time.Millisecond})
	var te *TimeoutError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "--timeout 100ms") {
		t.Fatalf("want a TimeoutError naming --timeout, got %v", err)
	}
}
