package tasks

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// loggedLines are the command output lines of a task log, in order.
func loggedLines(log, prefix string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if m := regexp.MustCompile(`\[INFO\]  (` + prefix + `\S*): stream=std(out|err)`).FindStringSubmatch(l); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

func TestRunLogsEveryLineUnderTheLogLimit(t *testing.T) {
	// 2000 short lines cost minLineCost each: 125 KiB.
	t.Setenv(CommandLogLimitEnv, "128KiB")
	e := newEnv(t)
	id := provisioned(t, e)
	res, err := RunCommands(context.Background(), e.deps, RunInput{Sandbox: SandboxRef{ID: id}, Command: Commands{"seq -f 'line-%g' 1 2000"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := loggedLines(e.log.String(), "line-"); len(got) != 2000 || got[1999] != "line-2000" {
		t.Fatalf("%d lines logged, want all 2000", len(got))
	}
	if res.OutputLinesDropped != 0 || strings.Contains(e.log.String(), "not logged") {
		t.Fatalf("nothing should be dropped under the limit: %+v", res)
	}
}

// Issue 29, item 4: one command printed 1 GiB into the task log in 31 s;
// with the default 10 min timeout that is ~20 GB of log on the worker's
// disk per task. Past the operator's limit, lines are counted, not logged,
// across all the task's commands.
func TestRunStopsLoggingAtTheLogLimit(t *testing.T) {
	const limit, flood = 4096, 20000
	t.Setenv(CommandLogLimitEnv, fmt.Sprint(limit))
	e := newEnv(t)
	id := provisioned(t, e)
	res, err := RunCommands(context.Background(), e.deps, RunInput{Sandbox: SandboxRef{ID: id},
		Command: Commands{fmt.Sprintf("seq -f 'flood-%%g' 1 %d", flood), "echo after-flood"}})
	if err != nil {
		t.Fatal(err)
	}
	log := e.log.String()
	logged := loggedLines(log, "flood-")
	if len(logged) == 0 {
		t.Fatalf("nothing of the flood was logged:\n%s", log)
	}
	cost := 0 // what the logged lines cost the budget
	for i, l := range logged {
		if l != fmt.Sprintf("flood-%d", i+1) {
			t.Fatalf("line %d logged as %q: the lines under the limit are the first ones, in order", i, l)
		}
		cost += max(len(l), minLineCost)
	}
	if next := max(len(fmt.Sprintf("flood-%d", len(logged)+1)), minLineCost); cost > limit || cost+next <= limit {
		t.Fatalf("%d lines logged at a cost of %d bytes; the limit is %d", len(logged), cost, limit)
	}
	// The second command's line counts against the same task's budget.
	if strings.Contains(log, "after-flood: stream") {
		t.Fatal("a later command of the task was logged past the limit")
	}
	dropped := int64(flood - len(logged) + 1)
	if res.OutputLinesDropped != dropped {
		t.Fatalf("output_lines_dropped = %d, want %d", res.OutputLinesDropped, dropped)
	}
	for _, want := range []string{
		"reached this task's log limit of 4 KiB; later lines are counted, not logged (the operator sets the limit with " + CommandLogLimitEnv + ")",
		fmt.Sprintf("%d line(s) of this command's output not logged", flood-len(logged)),
		fmt.Sprintf("1 line(s) of this command's output not logged (%d in this task so far", dropped),
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the task log lacks %q", want)
		}
	}
	if strings.Count(log, "reached this task's log limit") != 1 {
		t.Error("the limit should be announced once")
	}
	if !strings.Contains(res.OutputTail, "after-flood") {
		t.Errorf("output_tail should still end with the output: %q", res.OutputTail)
	}
}

func TestCommandLogLimitSetting(t *testing.T) {
	for v, want := range map[string]int64{"": DefaultCommandLogLimit, "-1": -1, "0": 0, "100": 100, "4KiB": 4096, "100 MiB": 100 << 20, "2GiB": 2 << 30, "7B": 7} {
		t.Setenv(CommandLogLimitEnv, v)
		if got, err := commandLogLimit(); err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", v, got, err, want)
		}
	}
	t.Setenv(CommandLogLimitEnv, "lots")
	e := newEnv(t)
	id := provisioned(t, e)
	_, err := RunCommands(context.Background(), e.deps, RunInput{Sandbox: SandboxRef{ID: id}, Command: Commands{"echo ran"}})
	if err == nil || !strings.Contains(err.Error(), CommandLogLimitEnv+`="lots" is not a size`) {
		t.Fatalf("want the setting named, got %v", err)
	}
	if strings.Contains(e.log.String(), "ran: stream") {
		t.Fatal("a command ran under a bad setting")
	}
}

// Issue 38, item 2: lines cost their length, so empty lines (and lines
// that render empty: an ANSI reset, a zero-width space) cost nothing and
// beat the cap: 100,000 of them under a 10 KiB cap logged all 100,000
// records (4.5 MB of log). Each line now costs at least minLineCost, so
// the cap bounds records as well as bytes.
func TestLogLimitCountsEmptyAndRenderedEmptyLines(t *testing.T) {
	const limit, flood = 10 << 10, 100_000
	t.Setenv(CommandLogLimitEnv, "10KiB")
	for name, line := range map[string]string{"empty": ``, "rendered empty": `\033[0m\342\200\213`} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			id := provisioned(t, e)
			cmd := fmt.Sprintf(`awk 'BEGIN { for (i = 0; i < %d; i++) printf "%s\n" }'`, flood, line)
			res, err := RunCommands(context.Background(), e.deps, RunInput{Sandbox: SandboxRef{ID: id}, Command: Commands{cmd}})
			if err != nil {
				t.Fatal(err)
			}
			records := strings.Count(e.log.String(), "[INFO]  : stream=stdout")
			if records == 0 {
				t.Fatalf("no empty line was logged at all; the test does not see them:\n%.2000s", e.log.String())
			}
			if want := limit / minLineCost; records > want {
				t.Fatalf("%d empty records logged under a %d-byte cap; want at most %d (each line costs at least %d bytes)", records, limit, want, minLineCost)
			}
			if res.OutputLinesDropped != int64(flood-records) {
				t.Fatalf("output_lines_dropped = %d, want %d", res.OutputLinesDropped, flood-records)
			}
		})
	}
}
