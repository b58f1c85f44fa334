// Package check finds the wiring mistakes between stub Dags and Go bundles
// that Airflow does not report, or reports where nobody looks: a stub task
// no bundle registers (it ends removed and the Dag run still succeeds), a
// Dag no bundle lists (its tasks fail with an empty log), a dag_id two
// bundles list (the coordinator takes whichever its directory walk finds
// first), a stub on a queue no coordinator serves, and an XCom-bound input
// naming a task that is not upstream.
//
// It also compares what a stub declares that Airflow applies only in its
// Python task runner, which a Go task replaces (outlets and mapping:
// datamodel.go; execution_timeout, multiple_outputs, do_xcom_push, the
// call's arguments, param defaults, branches: attributes.go), with what
// the Go side declares, and refuses what no Go-side declaration can do
// (task callbacks, e-mail, run_as_user, map_index_template ...).
//
// It reads the Dags with the Airflow they are deployed on (its DagBag, run
// by that Airflow's python: dagfacts.py) and the bundles as the
// coordinator does (walk.go), and runs each bundle's describe command for
// its bindings and declarations.
package check

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/internal/exeinfo"
)

// Options says what to check.
type Options struct {
	// Dags are Dags folders or Dag files, parsed as Airflow's Dag
	// processor parses them.
	Dags []string
	// Roots are executables roots (directories) or bundle files, searched
	// as the coordinator searches its executables_root. Empty: each
	// coordinator's own executables_root from Airflow's configuration.
	Roots []string
	// Queues are routed to an ExecutableCoordinator over Roots whatever
	// Airflow's configuration says (for a check outside the deployment,
	// in CI); other queues route as [sdk] queue_to_coordinator says.
	Queues []string
	// Python is the python of Airflow's environment; empty:
	// $AIRFLOW_GO_WORKER_PYTHON, then python3 on PATH.
	Python string
	// Env is the Python side's environment (nil: this process's). Its
	// AIRFLOW_HOME and AIRFLOW__SDK__* decide the routing checked.
	Env []string
	// Timeout bounds the whole check (0: no limit; the command's
	// --timeout defaults to DefaultTimeout); past it, Run returns a
	// *TimeoutError.
	Timeout time.Duration
}

// Finding is one mistake: where it is, what happens because of it, and
// what to do.
type Finding struct {
	Kind    Kind   `json:"kind"`
	File    string `json:"file"`
	DagID   string `json:"dag_id,omitempty"`
	TaskID  string `json:"task_id,omitempty"`
	Problem string `json:"problem"`
	Fix     string `json:"fix"`
}

// Kind names a kind of finding, for tools that read the JSON report.
type Kind string

// The kinds of finding.
const (
	ImportError       Kind = "import_error"         // Airflow cannot parse a Dag file
	RoutingError      Kind = "routing_error"        // the [sdk] coordinator settings are wrong
	QueueNotRouted    Kind = "queue_not_routed"     // a stub on a queue no coordinator serves
	NotAStub          Kind = "not_a_stub"           // a Python task on a Go queue
	DagNotInAnyBundle Kind = "dag_not_in_a_bundle"  // a Dag with Go tasks no bundle lists
	DagInTwoBundles   Kind = "dag_in_two_bundles"   // a Dag more than one bundle lists
	TaskNotRegistered Kind = "task_not_registered"  // a Go task the serving bundle lacks
	XComNotUpstream   Kind = "xcom_not_upstream"    // an input bound to a task that is not upstream
	XComUnknownTask   Kind = "xcom_unknown_task"    // an input bound to a task the Dag lacks
	BundleDoesNotLoad Kind = "bundle_does_not_load" // a bundle of this module that cannot load its own tasks
)

func (f Finding) String() string {
	where := f.File
	if f.DagID != "" {
		where += ": Dag " + f.DagID
	}
	if f.TaskID != "" {
		where += ", task " + f.TaskID
	}
	return fmt.Sprintf("%s: %s\n    fix: %s", where, f.Problem, f.Fix)
}

// Report is the outcome of a check.
type Report struct {
	Findings []Finding `json:"findings"`
	// Notes say what could not be checked, and why.
	Notes          []string `json:"notes"`
	AirflowVersion string   `json:"airflow_version"`
	Python         string   `json:"python"`
	Dags           int      `json:"dags"`     // Dags parsed
	GoTasks        int      `json:"go_tasks"` // tasks on a queue routed to an ExecutableCoordinator
	Bundles        []string `json:"bundles"`  // bundles found, in the coordinator's order
}

// Summary is the report's last line.
func (r Report) Summary() string {
	return fmt.Sprintf("%d finding(s): %d Dag(s) parsed by Airflow %s, %d Go task(s) checked against %d bundle(s)",
		len(r.Findings), r.Dags, r.AirflowVersion, r.GoTasks, len(r.Bundles))
}

// Run checks the Dags against the bundles.
func Run(ctx context.Context, o Options) (Report, error) {
	if len(o.Dags) == 0 {
		return Report{}, fmt.Errorf("no Dags to check: give --dags with a Dags folder or a Dag file")
	}
	python, err := choosePython(o.Python)
	if err != nil {
		return Report{}, err
	}
	env := o.Env
	if env == nil {
		env = os.Environ()
	}
	if len(o.Queues) > 0 && len(o.Roots) == 0 {
		return Report{}, fmt.Errorf("--queue needs --executables-root: the bundles its tasks run with")
	}
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, o.Timeout, &TimeoutError{Timeout: o.Timeout})
		defer cancel()
	}
	facts, err := readAirflow(ctx, python, o.Dags, env)
	if err != nil {
		return Report{}, err
	}
	forceQueues(&facts.Routing, o.Queues)
	c := &checker{ctx: ctx, facts: facts, roots: o.Roots, walks: map[string][]bundleFile{}, descriptions: map[string]*described{}, attrsNoted: map[string]bool{}}
	c.run()
	if err := timedOut(ctx, "bundles were describing their Dags"); err != nil {
		return Report{}, err
	}
	sort.SliceStable(c.report.Findings, func(i, j int) bool {
		a, b := c.report.Findings[i], c.report.Findings[j]
		return a.File < b.File || a.File == b.File && (a.DagID < b.DagID || a.DagID == b.DagID && a.TaskID < b.TaskID)
	})
	c.report.AirflowVersion, c.report.Python, c.report.Dags = facts.AirflowVersion, facts.Python, len(facts.Dags)
	if c.report.Findings == nil {
		c.report.Findings = []Finding{} // [] in JSON, not null
	}
	if c.report.Notes == nil {
		c.report.Notes = []string{}
	}
	for _, files := range c.walks {
		for _, f := range files {
			if f.b != nil && !slices.Contains(c.report.Bundles, f.path) {
				c.report.Bundles = append(c.report.Bundles, f.path)
			}
		}
	}
	return c.report, nil
}

// givenQueues is the coordinator --queue routes to.
const givenQueues = "--queue"

// forceQueues routes queues to an ExecutableCoordinator (whose roots are
// the checker's).
func forceQueues(r *routing, queues []string) {
	if len(queues) == 0 {
		return
	}
	if r.Coordinators == nil {
		r.Coordinators = map[string]coordinator{}
	}
	if r.QueueToCoordinator == nil {
		r.QueueToCoordinator = map[string]string{}
	}
	r.Coordinators[givenQueues] = coordinator{ClassPath: "airflow.sdk.coordinators.executable.ExecutableCoordinator", Executable: true}
	for _, q := range queues {
		r.QueueToCoordinator[q] = givenQueues
	}
}

type checker struct {
	ctx          context.Context
	facts        airflowFacts
	roots        []string
	walks        map[string][]bundleFile // roots joined -> the walk over them
	descriptions map[string]*described   // bundle path -> its description
	attrsNoted   map[string]bool         // bundles noted for not describing stub attributes
	report       Report
}

type described struct {
	d   Description
	err error
}

func (c *checker) add(f Finding) { c.report.Findings = append(c.report.Findings, f) }

func (c *checker) note(format string, args ...any) {
	c.report.Notes = append(c.report.Notes, fmt.Sprintf(format, args...))
}

func (c *checker) run() {
	files := make([]string, 0, len(c.facts.ImportErrors))
	for file := range c.facts.ImportErrors {
		files = append(files, file)
	}
	sort.Strings(files)
	for _, file := range files {
		c.add(Finding{Kind: ImportError, File: file, Problem: "Airflow cannot parse this file, so none of its Dags run: " + lastLine(c.facts.ImportErrors[file]),
			Fix: "fix the error (airflow dags list-import-errors, or python " + file + ", shows the traceback), then check again"})
	}
	r := c.facts.Routing
	if r.Error != "" {
		c.add(Finding{Kind: RoutingError, File: "[sdk] coordinators / queue_to_coordinator", Problem: "Airflow cannot read its coordinator settings: " + r.Error,
			Fix: "make both settings JSON objects (airflow.cfg [sdk], or AIRFLOW__SDK__COORDINATORS / AIRFLOW__SDK__QUEUE_TO_COORDINATOR)"})
	}
	if len(c.facts.Dags) == 0 && len(c.facts.ImportErrors) == 0 {
		c.note("no Dags found: Airflow's parser found none in the --dags paths (it reads only files that mention both \"airflow\" and \"dag\", unless [core] dag_discovery_safe_mode is off)")
	}
	if len(r.QueueToCoordinator) == 0 && r.Error == "" {
		var stubs []string
		for _, d := range c.facts.Dags {
			for _, t := range d.Tasks {
				if t.Stub {
					stubs = append(stubs, d.DagID+"."+t.TaskID)
				}
			}
		}
		if len(stubs) > 0 {
			c.add(Finding{Kind: QueueNotRouted, File: "[sdk] queue_to_coordinator",
				Problem: fmt.Sprintf("Airflow's configuration (AIRFLOW_HOME, AIRFLOW__SDK__*) routes no queue to a coordinator, so Airflow runs the %d stub task(s) (%s) as Python, where a stub fails", len(stubs), strings.Join(stubs, ", ")),
				Fix:     "check with the configuration of the deployment (its AIRFLOW_HOME or AIRFLOW__SDK__COORDINATORS / AIRFLOW__SDK__QUEUE_TO_COORDINATOR), or name the Go queues with --queue (e.g. --queue golang --executables-root dist/)"})
		}
		return
	}
	for _, d := range c.facts.Dags {
		c.checkDag(d)
	}
}

// checkDag checks one Dag's tasks on coordinator queues.
func (c *checker) checkDag(d dagFacts) {
	r := c.facts.Routing
	var goTasks []taskFacts
	rootsOf := map[string][]string{} // task id -> the roots its coordinator searches
	for _, t := range d.Tasks {
		key, routed := r.QueueToCoordinator[t.Queue]
		if !routed {
			if t.Stub {
				c.add(Finding{Kind: QueueNotRouted, File: d.FileLoc, DagID: d.DagID, TaskID: t.TaskID,
					Problem: fmt.Sprintf("a @task.stub on queue %q, which [sdk] queue_to_coordinator routes to no coordinator: Airflow runs it as a Python task, and a stub's Python fails (\"@task.stub should not be executed directly\")%s", t.Queue, routedQueues(r)),
					Fix:     fmt.Sprintf("route the queue to the Go coordinator, e.g. queue_to_coordinator = {%q: \"go\"} in airflow.cfg [sdk] (AIRFLOW__SDK__QUEUE_TO_COORDINATOR) where the tasks run, with \"go\" an ExecutableCoordinator in [sdk] coordinators; or put the stub on a queue that is routed", t.Queue)})
			}
			continue
		}
		co, ok := r.Coordinators[key]
		switch {
		case !ok:
			c.add(Finding{Kind: RoutingError, File: d.FileLoc, DagID: d.DagID, TaskID: t.TaskID,
				Problem: fmt.Sprintf("queue %q is routed to coordinator %q, which [sdk] coordinators does not define: every task Airflow runs fails (\"queue_to_coordinator references invalid coordinator key\")", t.Queue, key),
				Fix:     fmt.Sprintf("define %q in [sdk] coordinators ({\"classpath\": \"airflow.sdk.coordinators.executable.ExecutableCoordinator\", \"kwargs\": {\"executables_root\": [...]}}), or route the queue to a coordinator that is defined", key)})
			continue
		case co.Error != "":
			c.add(Finding{Kind: RoutingError, File: d.FileLoc, DagID: d.DagID, TaskID: t.TaskID,
				Problem: fmt.Sprintf("queue %q is routed to coordinator %q, which Airflow cannot build: %s", t.Queue, key, co.Error),
				Fix:     fmt.Sprintf("fix the classpath of %q in [sdk] coordinators", key)})
			continue
		case !co.Executable:
			continue // another language's coordinator (Java, ...): not ours to check
		}
		roots := c.roots
		if len(roots) == 0 {
			roots = co.ExecutablesRoot
		}
		if len(roots) == 0 {
			c.add(Finding{Kind: RoutingError, File: d.FileLoc, DagID: d.DagID, TaskID: t.TaskID,
				Problem: fmt.Sprintf("queue %q is routed to coordinator %q, which has no executables_root, so it finds no bundle", t.Queue, key),
				Fix:     fmt.Sprintf("give %q \"kwargs\": {\"executables_root\": [\"/opt/airflow/executables\"]} in [sdk] coordinators, or check with --executables-root", key)})
			continue
		}
		c.report.GoTasks++
		if !t.Stub {
			c.add(Finding{Kind: NotAStub, File: d.FileLoc, DagID: d.DagID, TaskID: t.TaskID,
				Problem: fmt.Sprintf("not a @task.stub, but on queue %q, which routes it to a Go bundle: its Python code never runs", t.Queue),
				Fix:     "make it a @task.stub with a Go implementation in a bundle, or put it on a queue that runs Python"})
		}
		c.refuseRunnerOnly(d, t)
		goTasks = append(goTasks, t)
		rootsOf[t.TaskID] = roots
	}
	// Tasks of one Dag on queues of different roots are looked up in each.
	byRoots := map[string][]taskFacts{}
	var order []string
	for _, t := range goTasks {
		k := strings.Join(rootsOf[t.TaskID], "\x00")
		if _, ok := byRoots[k]; !ok {
			order = append(order, k)
		}
		byRoots[k] = append(byRoots[k], t)
	}
	for _, k := range order {
		c.checkBundles(d, byRoots[k], rootsOf[byRoots[k][0].TaskID])
	}
}

func routedQueues(r routing) string {
	if len(r.QueueToCoordinator) == 0 {
		return "; no queue is routed at all (is AIRFLOW_HOME, or AIRFLOW__SDK__QUEUE_TO_COORDINATOR, that of the deployment?)"
	}
	qs := make([]string, 0, len(r.QueueToCoordinator))
	for q := range r.QueueToCoordinator {
		qs = append(qs, fmt.Sprintf("%q", q))
	}
	sort.Strings(qs)
	return "; routed queues: " + strings.Join(qs, ", ")
}

// checkBundles checks the Go tasks of d against the bundles under roots.
func (c *checker) checkBundles(d dagFacts, tasks []taskFacts, roots []string) {
	key := strings.Join(roots, "\x00")
	files, ok := c.walks[key]
	if !ok {
		files = walk(roots)
		c.walks[key] = files
	}
	where := strings.Join(roots, ", ")
	var usable, skipped []string
	var picked *bundleFile
	for i, f := range files {
		if !f.lists(d.DagID) {
			continue
		}
		switch v := f.b.Manifest.SDK.SupervisorSchemaVersion; {
		case f.notExecutable:
			skipped = append(skipped, f.path+" (not executable by this user: the coordinator skips it)")
		case len(c.facts.SchemaVersions) > 0 && !slices.Contains(c.facts.SchemaVersions, v):
			skipped = append(skipped, fmt.Sprintf("%s (supervisor schema %q, which Airflow %s does not know: it knows %s)", f.path, v, c.facts.AirflowVersion, strings.Join(c.facts.SchemaVersions, ", ")))
		default:
			usable = append(usable, f.path)
			if picked == nil {
				picked = &files[i]
			}
		}
	}
	if picked == nil {
		problem := fmt.Sprintf("no bundle in %s lists this Dag, so its Go tasks (%s) fail before they start, with an empty task log (\"cannot find executable bundle containing dag_id=%s\" is only in the log of the process that ran them)", where, taskIDs(tasks), d.DagID)
		if len(skipped) > 0 {
			problem += "; bundles that list it but are skipped: " + strings.Join(skipped, "; ")
		}
		c.add(Finding{Kind: DagNotInAnyBundle, File: d.FileLoc, DagID: d.DagID, Problem: problem,
			Fix: fmt.Sprintf("pack a bundle that registers Dag %s and these tasks (bundle config dags.%s.tasks, or bundles.Register in a Go main) with the pack flags for this Airflow, and install it (mode 0755) in %s", d.DagID, d.DagID, where)})
		return
	}
	if len(usable) > 1 {
		c.add(Finding{Kind: DagInTwoBundles, File: d.FileLoc, DagID: d.DagID,
			Problem: fmt.Sprintf("%d bundles list this Dag: %s; the coordinator runs all of its tasks with the first its directory walk finds, here %s, and the walk follows the order entries have on disk, not their names, so another worker may pick another", len(usable), strings.Join(usable, ", "), picked.path),
			Fix:     fmt.Sprintf("keep Dag %s in one bundle: remove it from the others' config (or Go main) and pack them again", d.DagID)})
	}
	registered := picked.b.Manifest.Dags[d.DagID].Tasks
	desc := c.describe(picked.path)
	for _, t := range tasks {
		if !slices.Contains(registered, t.TaskID) {
			c.notRegistered(d, t, picked.path, usable, files)
			continue
		}
		if desc.err != nil {
			continue
		}
		td := desc.d.Dags[d.DagID][t.TaskID]
		c.checkDataModel(d, t, td, picked.path)
		c.compareAttributes(d, t, td, picked)
		c.checkXComInputs(d, t, td, picked.path)
	}
}

// notRegistered reports a Go task the bundle the coordinator picks for its
// Dag lacks, naming the other bundles that register it.
func (c *checker) notRegistered(d dagFacts, t taskFacts, picked string, usable []string, files []bundleFile) {
	problem := fmt.Sprintf("on a Go queue, but %s, the bundle the coordinator runs Dag %s with, does not register it: Airflow marks the task removed and the Dag run can still succeed", picked, d.DagID)
	for _, other := range usable {
		if other == picked {
			continue
		}
		for _, f := range files {
			if f.path == other && slices.Contains(f.b.Manifest.Dags[d.DagID].Tasks, t.TaskID) {
				problem += fmt.Sprintf(" (%s registers it, but the coordinator runs a whole Dag with one bundle)", other)
			}
		}
	}
	c.add(Finding{Kind: TaskNotRegistered, File: d.FileLoc, DagID: d.DagID, TaskID: t.TaskID, Problem: problem,
		Fix: fmt.Sprintf("register %s under Dag %s in that bundle (bundle config dags.%s.tasks.%s, or bundles.Register(%q, %q, ...)) and pack it again; or remove the stub", t.TaskID, d.DagID, d.DagID, t.TaskID, d.DagID, t.TaskID)})
}

// checkXComInputs: an input bound to an XCom must name a task of the Dag
// upstream of this one.
func (c *checker) checkXComInputs(d dagFacts, t taskFacts, td TaskDescription, bundle string) {
	inDag := map[string]bool{}
	for _, other := range d.Tasks {
		inDag[other.TaskID] = true
	}
	for _, in := range sortedKeys(td.XComInputs) {
		x := td.XComInputs[in]
		switch {
		case !inDag[x.Task]:
			c.add(Finding{Kind: XComUnknownTask, File: d.FileLoc, DagID: d.DagID, TaskID: t.TaskID,
				Problem: fmt.Sprintf("input %s is bound to the XCom of task %s (%s), which Dag %s does not have: the task fails when it starts", in, x.Task, bundle, d.DagID),
				Fix:     fmt.Sprintf("bind %s to an upstream task of this Dag (inputs: {%s: {xcom: <task_id>}}), or add task %s to the Dag upstream of %s", in, in, x.Task, t.TaskID)})
		case !slices.Contains(t.Upstream, x.Task):
			c.add(Finding{Kind: XComNotUpstream, File: d.FileLoc, DagID: d.DagID, TaskID: t.TaskID,
				Problem: fmt.Sprintf("input %s is bound to the XCom of task %s (%s), which is not upstream of %s: %s may start before %s has run, and then finds no XCom", in, x.Task, bundle, t.TaskID, t.TaskID, x.Task),
				Fix:     fmt.Sprintf("make %s upstream of %s (%s >> %s, or pass its result in the stub call: %s(%s=%s())), or bind %s to a task that is upstream", x.Task, t.TaskID, x.Task, t.TaskID, t.TaskID, in, x.Task, in)})
		}
	}
}

// describe runs a bundle's describe once; a bundle that cannot describe
// itself gets a note, and its XCom bindings go unchecked.
func (c *checker) describe(path string) *described {
	if d, ok := c.descriptions[path]; ok {
		return d
	}
	d, err := describeBundle(c.ctx, path)
	r := &described{d: d, err: err}
	c.descriptions[path] = r
	switch {
	case err == nil:
	case exeinfo.BuiltWithThisModule(path):
		// Its describe loads what a task process loads at start-up (the
		// standard bundle: its packed config, with every load-time
		// check), so every task it serves would fail the same way.
		c.add(Finding{Kind: BundleDoesNotLoad, File: path,
			Problem: fmt.Sprintf("the bundle cannot load its own tasks, so every task Airflow runs with it fails before it starts: %v", err),
			Fix:     "fix what the error names (in the standard bundle, a key of its bundle config), then pack it again with pack --config, which refuses such a config, and install the new file"})
	default:
		c.note("XCom bindings of %s not checked (a bundle not built with airflow-go-worker, or built before describe): %v", path, err)
	}
	return r
}

func taskIDs(tasks []taskFacts) string {
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.TaskID
	}
	return strings.Join(ids, ", ")
}
