package supervisor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/testing/memwatch"
	"github.com/airflow-sandbox/airflow-go-worker/testing/syncbuf"
)

// The inner lines of the test bundle's multi-line secret (see testbundle).
var keyLines = []string{"MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7", "VJTUt9Us8cKjMzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvD"}

// Issue 10, hole 3: a multi-line secret printed or logged line by line
// showed its inner lines in what the supervisor shows and returns.
func TestMultiLineSecretMaskedInOutputAndLogs(t *testing.T) {
	s, logs := newSup(t)
	res := run(t, s, TaskRequest{DagID: "e2e", TaskID: "leak_multiline"})
	if res.State != StateSuccess {
		t.Fatalf("state %s\n%s", res.State, logs)
	}
	all := logs.String() + fmt.Sprint(res.Output, res.LogLines)
	for _, l := range keyLines {
		if strings.Contains(all, l[:20]) {
			t.Fatalf("a line of the secret leaked:\n%s", all)
		}
	}
	if !strings.Contains(logs.String(), "key line ***") || !strings.Contains(logs.String(), "[task.stdout] ***") {
		t.Fatalf("want masked lines in the shown output:\n%s", logs)
	}
}

// Issue 10, hole 7: the supervisor kept every output line and log record
// in memory (2 GiB printed took `run` to 5.4 GiB RSS). What it keeps is now
// bounded; here 256 MiB of output and 32 MiB of log records must not grow
// its heap by more than a small multiple of the kept tails.
func TestOutputFloodKeepsMemoryBounded(t *testing.T) {
	s, _ := newSup(t)
	s.Logs = io.Discard
	watch := memwatch.Start()
	res := run(t, s, TaskRequest{DagID: "e2e", TaskID: "flood", Conf: map[string]any{"stdout_mib": 256, "log_mib": 32}})
	peak := watch.Stop()
	if res.State != StateSuccess {
		t.Fatalf("state %s, output %v", res.State, res.Output[max(0, len(res.Output)-5):])
	}
	if res.OutputDropped == 0 || res.LogLinesDropped == 0 {
		t.Fatalf("nothing was dropped (%d output lines, %d records kept): the bound is not applied", len(res.Output), len(res.LogLines))
	}
	if n := len(res.Output); n == 0 || !strings.HasPrefix(res.Output[n-1], "stdout: 0123") {
		t.Fatalf("the most recent output should be kept, got %d lines", n)
	}
	const limit = 64 << 20
	t.Logf("kept %d output lines (%d dropped), %d records (%d dropped); heap growth %d MiB, RSS peak %d MiB",
		len(res.Output), res.OutputDropped, len(res.LogLines), res.LogLinesDropped, peak.HeapGrowth()>>20, peak.RSS>>20)
	if peak.HeapGrowth() > limit {
		t.Fatalf("heap grew by %d MiB while 288 MiB streamed through; want under %d MiB", peak.HeapGrowth()>>20, limit>>20)
	}
}

// BenchmarkOutputFlood2GiB is the measurement: 2 GiB printed in a
// task, peak heap and RSS of the supervisor's process.
func BenchmarkOutputFlood2GiB(b *testing.B) {
	s := &Supervisor{Executable: bundleBin, Env: []string{"PATH=" + os.Getenv("PATH")}, Logs: io.Discard}
	for b.Loop() {
		watch := memwatch.Start()
		res, err := s.RunTask(b.Context(), TaskRequest{DagID: "e2e", TaskID: "flood", Conf: map[string]any{"stdout_mib": 2048}})
		peak := watch.Stop()
		if err != nil || res.State != StateSuccess {
			b.Fatalf("%v %s", err, res.State)
		}
		b.ReportMetric(float64(peak.HeapGrowth())/(1<<20), "heap-MiB")
		b.ReportMetric(float64(peak.RSS)/(1<<20), "rss-MiB")
	}
}

// A log record over the limit is skipped with a note, and reading goes on
// (stopping would leave the task blocked on a full socket).
func TestReadLogsSkipsAnOverlongRecordAndGoesOn(t *testing.T) {
	var in bytes.Buffer
	in.WriteString(`{"event":"first","level":"info"}` + "\n")
	in.WriteString(`{"event":"` + strings.Repeat("x", maxLogRecord) + `"}` + "\n")
	in.WriteString("not json\n")
	in.WriteString(`{"event":"last","level":"info"}`)
	var shown syncbuf.Buffer
	recs, dropped := readLogs(&in, newRedactor(), &shower{w: &shown})
	if len(recs) != 2 || recs[0]["event"] != "first" || recs[1]["event"] != "last" || dropped != 0 {
		t.Fatalf("got %d records (%d dropped)", len(recs), dropped)
	}
	if !strings.Contains(shown.String(), "skipped a log record of") || !strings.Contains(shown.String(), "log line is not JSON") {
		t.Fatalf("shown:\n%s", shown.String())
	}
}

func TestTailKeepsTheMostRecentWithinBudget(t *testing.T) {
	k := tail[string]{max: 10}
	for i := range 5000 {
		k.add(fmt.Sprint(i%10), 3)
	}
	got, dropped := k.get()
	if len(got) != 3 || dropped != 4997 || got[2] != "9" {
		t.Fatalf("kept %v, dropped %d", got, dropped)
	}
	if cap(k.items) > 4096 {
		t.Fatalf("the dropped front is never reclaimed: cap %d", cap(k.items))
	}
	k = tail[string]{max: 1}
	k.add("one item bigger than the budget", 30)
	if got, _ := k.get(); len(got) != 1 {
		t.Fatal("the latest item is always kept")
	}
}

// Issue 10, hole 9: a connection whose reply exceeds the 64 MiB frame cap
// was never answered, so the task waited for it forever. It now gets an
// error reply that says why.
func TestOversizedConnectionReplyIsAnsweredWithAnError(t *testing.T) {
	s, logs := newSup(t)
	file := filepath.Join(t.TempDir(), "connections.json")
	conns, _ := json.Marshal(map[string]any{"db": map[string]any{"conn_type": "generic", "password": "pw-of-the-big-one",
		"extra": map[string]any{"blob": strings.Repeat("y", 65<<20)}}})
	if err := os.WriteFile(file, conns, 0o600); err != nil {
		t.Fatal(err)
	}
	s.ConnectionsFile = file
	res := run(t, s, TaskRequest{DagID: "e2e", TaskID: "print_password"})
	shown := logs.String()
	if strings.Contains(shown, "cancelled; sending SIGTERM") {
		t.Fatalf("the task hung waiting for the reply:\n%s", shown)
	}
	if res.State != StateFailed || !strings.Contains(fmt.Sprint(res.LogLines), "over the comm socket's 67108864-byte frame cap") {
		t.Fatalf("state %s; want the task to fail naming the frame cap:\n%v", res.State, res.LogLines)
	}
}

// Issue 10, hole 9: XCom state files were world-readable (0644).
func TestXComStateIsPrivate(t *testing.T) {
	s, _ := newSup(t)
	if err := s.PutXCom("d", "r", "t", "k", map[string]any{"token": "x"}); err != nil {
		t.Fatal(err)
	}
	err := filepath.Walk(filepath.Join(s.StateDir, "xcom"), func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		want := os.FileMode(0o600)
		if fi.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", p, fi.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok, err := s.GetXCom("d", "r", "t", "k"); err != nil || !ok || v.(map[string]any)["token"] != "x" {
		t.Fatalf("read back %v %v %v", v, ok, err)
	}
}
