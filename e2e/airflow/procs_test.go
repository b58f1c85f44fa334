package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/eventually"
)

// alive reports whether a pid still runs (and is not a zombie).
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	fields := strings.Fields(string(data))
	return len(fields) > 2 && fields[2] != "Z"
}

// waitPIDFile reads the pid a child wrote, failing near the test's deadline.
func waitPIDFile(t *testing.T, path string) int {
	t.Helper()
	var data []byte
	eventually.True(t, path+" to be written", func() bool {
		var err error
		data, err = os.ReadFile(path)
		return err == nil && strings.HasSuffix(string(data), "\n")
	})
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// stop takes the whole process group down, including a grandchild that
// ignores SIGTERM (a LocalExecutor worker or a forked bundle, say), and a
// child left running after its leader exited.
func TestStopKillsTheWholeGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "grandchild")
	script := `sh -c 'trap "" TERM; echo $$ > "$1"; while :; do sleep 1; done' sh "$0" & wait`
	p, err := startProc("test", filepath.Join(dir, "log"), os.Environ(), "sh", "-c", script, pidFile)
	if err != nil {
		t.Fatal(err)
	}
	grandchild := waitPIDFile(t, pidFile)
	// A stop that waited for the grandchild, which never exits on its
	// own, would hang until go test's -timeout fails the test.
	p.stop(500 * time.Millisecond)
	if !eventually.Holds(t, func() bool { return !alive(grandchild) }) {
		syscall.Kill(grandchild, syscall.SIGKILL)
		t.Fatalf("the grandchild %d that ignores SIGTERM survived stop", grandchild)
	}
}

// runBounded does not wait past its timeout for a command that hangs, and
// says which command it was. (One that waited for `sleep infinity` would
// hang until go test's -timeout fails the test.)
func TestRunBoundedTimesOut(t *testing.T) {
	dir := t.TempDir()
	err := runBounded(context.Background(), 300*time.Millisecond, "hanging step", filepath.Join(dir, "log"), os.Environ(), "sleep", "infinity")
	if err == nil || !strings.Contains(err.Error(), "hanging step did not finish within 300ms") {
		t.Fatalf("err = %v", err)
	}
}

func TestRunBoundedReportsAFailureWithItsLog(t *testing.T) {
	dir := t.TempDir()
	err := runBounded(context.Background(), time.Minute, "failing step", filepath.Join(dir, "log"), os.Environ(), "sh", "-c", "echo the reason; exit 3")
	if err == nil || !strings.Contains(err.Error(), "failing step failed") || !strings.Contains(err.Error(), "the reason") {
		t.Fatalf("err = %v", err)
	}
}
