package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// The agent_handoff example's analyse task is common.ai's real
// AgentOperator; only its model is ours: llm_default points at the
// scripted model server (llmserver.go), which plays an analyst working in
// the sandbox through SandboxToolset's four tools.
const (
	llmConnID  = "llm_default" // the connection examples/agent_handoff/dag.py names
	agentModel = "scripted-analyst"
	reportKey  = "reports/%s/report.md" // collect's export, per run (the example's bundle.yaml)
)

// topCommand is the agent's first command: the three largest customers by
// total amount, computed in the sandbox from the orders.csv provision
// staged there.
const topCommand = `awk -F, 'NR > 1 { t[$2] += $3 } END { for (c in t) printf "%s %.2f\n", c, t[c] }' orders.csv | sort -k2,2 -rn | head -n 3`

// sandboxTools are the tools SandboxToolset gives the agent.
var sandboxTools = []string{"run_command", "read_file", "write_file", "list_directory"}

// agentRun is the model's side of one good run, in order: run topCommand,
// write report.md from its output, read the report back, list the working
// directory, then answer. Each step checks the tool result before it, as
// far as the script depends on it; a result it cannot use ends the run
// with an error (the server refuses the request, and the run fails on it).
func agentRun(r *chatRequest) (chatTurn, error) {
	for _, t := range sandboxTools {
		if !slices.Contains(r.toolNames(), t) {
			return chatTurn{}, fmt.Errorf("the agent offers the tools %v, without SandboxToolset's %s", r.toolNames(), t)
		}
	}
	returns := r.toolReturns()
	switch len(returns) {
	case 0:
		return chatTurn{tool: "run_command", args: map[string]any{"command": topCommand}}, nil
	case 1:
		top, err := parseTop(returns[0].text())
		if err != nil {
			return chatTurn{}, err
		}
		return chatTurn{tool: "write_file", args: map[string]any{"path": "report.md", "content": report(top)}}, nil
	case 2:
		return chatTurn{tool: "read_file", args: map[string]any{"path": "report.md"}}, nil
	case 3:
		top, _ := parseTop(returns[0].text())
		if got, want := returns[2].text(), strings.TrimSuffix(report(top), "\n"); got != want {
			return chatTurn{}, fmt.Errorf("read_file returned %q, not the report written (%q)", got, want)
		}
		return chatTurn{tool: "list_directory", args: map[string]any{"path": "."}}, nil
	default:
		entries := strings.Split(returns[3].text(), "\n")
		if !slices.Contains(entries, "orders.csv") || !slices.Contains(entries, "report.md") {
			return chatTurn{}, fmt.Errorf("list_directory returned %q, without orders.csv and report.md", returns[3].text())
		}
		top, _ := parseTop(returns[0].text())
		return chatTurn{text: "report.md is written: the largest customers are " + strings.Join(names(top), ", ") + "."}, nil
	}
}

// customerTotal is one line of topCommand's output.
type customerTotal struct {
	name, amount string
}

func names(top []customerTotal) []string {
	var out []string
	for _, c := range top {
		out = append(out, c.name)
	}
	return out
}

// parseTop reads run_command's result for topCommand: "[stdout]" and three
// "NAME AMOUNT" lines.
func parseTop(result string) ([]customerTotal, error) {
	out, ok := strings.CutPrefix(result, "[stdout]\n")
	if !ok {
		return nil, fmt.Errorf("run_command returned %q, not the command's standard output", result)
	}
	var top []customerTotal
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			return nil, fmt.Errorf("run_command returned %q: line %q is not NAME AMOUNT", result, l)
		}
		top = append(top, customerTotal{f[0], f[1]})
	}
	if len(top) != 3 {
		return nil, fmt.Errorf("run_command returned %q, not three customers", result)
	}
	return top, nil
}

// report is the report.md the agent writes for top.
func report(top []customerTotal) string {
	var b strings.Builder
	b.WriteString("# Top customers\n\nBy total amount in orders.csv:\n\n")
	for i, c := range top {
		fmt.Fprintf(&b, "%d. %s: %s\n", i+1, c.name, c.amount)
	}
	b.WriteString("\nWritten by the scripted agent in the sandbox.\n")
	return b.String()
}

// wantTop is the three largest customers of the input, as the driver
// computes them (not the sandbox).
func wantTop(in orders) []customerTotal {
	var all []customerTotal
	for c := range in.totals {
		all = append(all, customerTotal{c, fmt.Sprintf("%.2f", in.totals[c])})
	}
	sort.Slice(all, func(i, j int) bool { return in.totals[all[i].name] > in.totals[all[j].name] })
	return all[:min(3, len(all))]
}

// checkAgentHandoff: provision made the Modal sandbox, the agent ran its
// four tools in it (the fake Modal server ran them), collect exported the
// agent's report to S3 and destroyed the sandbox.
func checkAgentHandoff(ctx context.Context, e *checkEnv, r *dagRun) []error {
	errs := allSucceeded(r, "provision", "analyse", "collect")
	in, err := parseOrders(e.store.input)
	if err != nil {
		return append(errs, err)
	}
	top := wantTop(in)
	id := provisioned(ctx, e, r, &errs)

	// The model was asked five times (four tools, then the answer), each
	// answered; its answer is the operator's return value.
	ex := e.llm.exchangesOf(r.runID)
	if len(ex) != len(sandboxTools)+1 {
		errs = append(errs, fmt.Errorf("the model server answered %d requests for this run, want %d (one per tool, then the answer)", len(ex), len(sandboxTools)+1))
	}
	wantAnswer := "report.md is written: the largest customers are " + strings.Join(names(top), ", ") + "."
	var answer string
	if err := e.api.xcom(ctx, r, "analyse", "return_value", &answer); err != nil {
		errs = append(errs, err)
	} else if answer != wantAnswer {
		errs = append(errs, fmt.Errorf("analyse returned %q, want the model's answer %q", answer, wantAnswer))
	}

	// Every tool ran in the sandbox provision made.
	execs := execsIn(e, id)
	for _, want := range []struct {
		what  string
		match func([]string) bool
	}{
		{"run_command's command", func(a []string) bool { return slices.Equal(a, []string{"sh", "-c", topCommand}) }},
		{"write_file of report.md", func(a []string) bool { return fsTool(a, "WriteFile", "/report.md") }},
		{"read_file of report.md", func(a []string) bool {
			return len(a) == 3 && a[0] == "sh" && strings.Contains(a[2], "-- report.md") && strings.Contains(a[2], "base64")
		}},
		{"list_directory", func(a []string) bool { return fsTool(a, "ListFiles", "") }},
	} {
		if !slices.ContainsFunc(execs, want.match) {
			errs = append(errs, fmt.Errorf("the fake Modal server ran no %s in sandbox %s (it ran %d commands there)", want.what, id, len(execs)))
		}
	}
	if ids := e.modal.createdFor(r.scenario.dagID, r.runID); len(ids) != 1 {
		errs = append(errs, fmt.Errorf("the fake Modal server created %d sandboxes for this run (%v), want provision's alone", len(ids), ids))
	}

	key := fmt.Sprintf(reportKey, r.runID)
	var urls []string
	if err := e.api.xcom(ctx, r, "collect", "return_value", &urls); err != nil {
		errs = append(errs, err)
	} else if want := []string{"s3://" + bucket + "/" + key}; !slices.Equal(urls, want) {
		errs = append(errs, fmt.Errorf("collect returned %v, want %v", urls, want))
	}
	if got, err := e.store.get(ctx, key); err != nil {
		errs = append(errs, err)
	} else if want := report(top); string(got) != want {
		errs = append(errs, fmt.Errorf("s3://%s/%s is %q, want the agent's report of the three largest customers, %q", bucket, key, got, want))
	}
	errs = append(errs, noPartials(ctx, e, "reports/")...)
	return append(errs, noSandboxLeft(ctx, e, r, id)...)
}

// checkAgentModelDown: the model answered every request with an error, so
// analyse failed and ran nothing in the sandbox; collect still ran
// (all_done), found no report to export, and destroyed the sandbox. The
// run's state is Airflow's: collect is its only leaf, and it failed.
func checkAgentModelDown(ctx context.Context, e *checkEnv, r *dagRun) []error {
	var errs []error
	for task, want := range map[string]string{"provision": "success", "analyse": "failed", "collect": "failed"} {
		if got := r.tasks[task].state; got != want {
			errs = append(errs, fmt.Errorf("task %s is %q, want %s", task, got, want))
		}
	}
	id := provisioned(ctx, e, r, &errs)

	// The model was asked, and every answer was an outage.
	ex := e.llm.exchangesOf(r.runID)
	if len(ex) == 0 {
		errs = append(errs, fmt.Errorf("the model server got no request for this run: analyse did not fail on the model"))
	}
	for _, x := range ex {
		if x.status != 500 {
			errs = append(errs, fmt.Errorf("the model server answered a request of this run with HTTP %d, want 500 (the outage)", x.status))
		}
	}
	errs = append(errs, logSays(ctx, e, r, "analyse", "scripted outage: the model is unavailable")...)
	for _, a := range execsIn(e, id) {
		if slices.Equal(a, []string{"sh", "-c", topCommand}) {
			errs = append(errs, fmt.Errorf("the agent's command ran in sandbox %s though the model never answered", id))
		}
	}

	errs = append(errs, logSays(ctx, e, r, "collect", "sandbox destroyed", "could not export report.md", "the file does not exist")...)
	key := fmt.Sprintf(reportKey, r.runID)
	if keys, err := e.store.keys(ctx, key); err != nil {
		errs = append(errs, err)
	} else if len(keys) > 0 {
		errs = append(errs, fmt.Errorf("s3://%s/%s exists, though the agent wrote no report", bucket, key))
	}
	errs = append(errs, noPartials(ctx, e, "reports/")...)
	return append(errs, noSandboxLeft(ctx, e, r, id)...)
}

// provisioned is the sandbox id provision returned (adding a problem to
// errs when it returned none).
func provisioned(ctx context.Context, e *checkEnv, r *dagRun, errs *[]error) string {
	var id string
	if err := e.api.xcom(ctx, r, "provision", "return_value", &id); err != nil {
		*errs = append(*errs, err)
	} else if id == "" {
		*errs = append(*errs, fmt.Errorf("provision returned an empty sandbox id"))
	}
	return id
}

// execsIn lists the argv of every command the fake Modal server started in
// sandbox id.
func execsIn(e *checkEnv, id string) [][]string {
	var out [][]string
	for _, x := range e.modal.srv.Execs() {
		if x.SandboxID == id {
			out = append(out, x.Args)
		}
	}
	return out
}

// fsTool says whether argv is the Modal filesystem helper doing op on a
// path ending in suffix.
func fsTool(argv []string, op, suffix string) bool {
	if len(argv) != 2 || !strings.HasSuffix(argv[0], "modal-sandbox-fs-tools") {
		return false
	}
	var req map[string]struct{ Path string }
	if json.Unmarshal([]byte(argv[1]), &req) != nil {
		return false
	}
	p, ok := req[op]
	return ok && strings.HasSuffix(p.Path, suffix)
}

// logSays fails unless the task's last try logged every one of want.
func logSays(ctx context.Context, e *checkEnv, r *dagRun, task string, want ...string) []error {
	text, err := e.api.taskLog(ctx, r, task, max(1, r.tasks[task].try))
	if err != nil {
		return []error{fmt.Errorf("the log of %s: %w", task, err)}
	}
	var errs []error
	for _, w := range want {
		if !strings.Contains(text, w) {
			errs = append(errs, fmt.Errorf("the log of %s does not say %q:\n%s", task, w, text))
		}
	}
	return errs
}
