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
	t.Setenv(CommandLogLimitEnv, "64KiB")
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
	size := 0
	for i, l := range logged {
		if l != fmt.Sprintf("flood-%d", i+1) {
			t.Fatalf("line %d logged as %q: the lines under the limit are the first ones, in order", i, l)
		}
		size += len(l)
	}
	if next := len(fmt.Sprintf("flood-%d", len(logged)+1)); size > limit || size+next <= limit {
		t.Fatalf("%d bytes logged in %d lines; the limit is %d", size, len(logged), limit)
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
