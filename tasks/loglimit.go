package tasks

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
)

// CommandLogLimitEnv is the operator's cap on how much of its commands'
// output one task writes to its task log: a size in bytes, or with a unit
// (KiB, MiB, GiB), or -1 for none. Unset: DefaultCommandLogLimit. The task
// log lands on the worker's disk, and a command that prints 1 GiB in 30 s
// would otherwise fill it at that rate for as long as its timeout allows.
const CommandLogLimitEnv = "AIRFLOW_GO_WORKER_MAX_COMMAND_LOG"

// DefaultCommandLogLimit is the cap when CommandLogLimitEnv is unset.
const DefaultCommandLogLimit = 100 << 20

// minLineCost is what one logged line costs the budget at least, however
// short: an empty line (or one that renders empty, its escape sequences and
// zero-width characters dropped) still becomes a record of some 50 bytes in
// the task log, so 100,000 of them under a 10 KiB cap wrote 4.5 MB when
// they cost nothing.
const minLineCost = 64

// commandLogLimit reads CommandLogLimitEnv (-1: no cap).
func commandLogLimit() (int64, error) {
	v := strings.TrimSpace(os.Getenv(CommandLogLimitEnv))
	if v == "" {
		return DefaultCommandLogLimit, nil
	}
	if v == "-1" {
		return -1, nil
	}
	n, err := parseSize(v)
	if err != nil {
		return 0, final.Errorf("%s=%q is not a size: give bytes or a number with KiB, MiB or GiB (the default is 100MiB), or -1 for no limit", CommandLogLimitEnv, v)
	}
	return n, nil
}

func parseSize(v string) (int64, error) {
	num, mult := v, int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}} {
		if s, ok := strings.CutSuffix(v, u.suffix); ok {
			num, mult = strings.TrimSpace(s), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("bad size %q", v)
	}
	return n * mult, nil
}

// logBudget is what a task may still write of its commands' output to the
// task log, shared by the commands it runs and by their two streams. Past
// the cap, lines are counted, not logged (the output tail still follows
// the output, so the result shows how it ended).
type logBudget struct {
	mu           sync.Mutex
	limit        int64 // -1: none
	used         int64
	full         bool
	droppedLines int64
	droppedBytes int64
}

func newLogBudget(limit int64) *logBudget { return &logBudget{limit: limit} }

// take reports whether a line of n bytes goes to the log; it costs the
// budget n bytes, or minLineCost when shorter. The first line refused says
// so in the log, once.
func (b *logBudget) take(log hclog.Logger, n int) bool {
	if b == nil {
		return true
	}
	cost := int64(max(n, minLineCost))
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.full && (b.limit < 0 || b.used+cost <= b.limit) {
		b.used += cost
		return true
	}
	if !b.full {
		b.full = true
		log.Warn(fmt.Sprintf("command output reached this task's log limit of %s; later lines are counted, not logged (the operator sets the limit with %s)", sizeString(b.limit), CommandLogLimitEnv))
	}
	b.droppedLines++
	b.droppedBytes += int64(n)
	return false
}

// spent is what a deferred task carries to its next resume: the budget
// it used and whether it is full (its one warning said so already).
func (b *logBudget) spent() (used int64, full bool) {
	if b == nil {
		return 0, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.full
}

// resumeFrom starts a resumed task's budget where its last run left it:
// the cap is the task's, however many times it deferred.
func (b *logBudget) resumeFrom(used int64, full bool) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used, b.full = max(used, 0), full
}

// dropped is how many lines, and bytes, the task has not logged so far.
func (b *logBudget) dropped() (lines, bytes int64) {
	if b == nil {
		return 0, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.droppedLines, b.droppedBytes
}

func sizeString(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
