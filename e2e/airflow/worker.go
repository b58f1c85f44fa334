package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// celeryWorkerQueues are the queues every worker consumes: the stub Dags'
// tasks are on golang, Python tasks (such as sandbox_conversion's
// announce) on default.
const celeryWorkerQueues = coordinatorQueue + ",default"

// hostWorker is one Airflow worker (`airflow celery worker`, or `airflow
// edge worker`: edge.go) on a host of its own: its own network namespace
// (reaching the control plane over the bridge), UTS namespace (its
// hostname, which Airflow records as the task's hostname) and PID
// namespace (so killing its first process kills everything on the "host":
// the worker, the task supervisors and the bundles they forked), and its
// own directories: Airflow home and task logs, Dags folder,
// executables_root with its copy of the bundles, and state.
type hostWorker struct {
	i           int
	host        string
	ns          namespace
	root        string // its directories live under here
	home        string
	dags        string
	executables string
	state       string
	env         []string // set by the caller before start
	logs        string

	kind    string   // "Celery worker", "edge worker": for messages
	command []string // the worker's argv, set by the caller before start
	// ready says whether the worker takes tasks, or why not yet.
	ready func() (bool, string, error)
	// beforeRestart, when set, runs before every start but the first (the
	// Edge API refuses a worker whose name is still registered as active).
	beforeRestart func(context.Context) error

	proc   *proc
	starts int
	killed bool // killed on purpose and not restarted
}

func newHostWorker(w *workdir, ns namespace, i int, kind string) (*hostWorker, error) {
	cw := &hostWorker{i: i, host: workerHost(i), ns: ns, root: filepath.Join(w.root, workerHost(i)), logs: w.logs, kind: kind}
	cw.home, cw.dags = filepath.Join(cw.root, "home"), filepath.Join(cw.root, "dags")
	cw.executables, cw.state = filepath.Join(cw.root, "executables"), filepath.Join(cw.root, "state")
	for _, d := range []string{cw.home, cw.dags, cw.executables, cw.state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	return cw, nil
}

// install copies every file of from into to, as an image build or a
// deploy step puts the bundles and Dag files on each worker.
func install(from, to string) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if err := copyFile(filepath.Join(from, e.Name()), filepath.Join(to, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// start runs the worker (again, after a kill) and waits until it says it
// is ready to take tasks.
func (cw *hostWorker) start(ctx context.Context, timeout time.Duration) error {
	if cw.starts > 0 && cw.beforeRestart != nil {
		if err := cw.beforeRestart(ctx); err != nil {
			return err
		}
	}
	if err := cw.launch(); err != nil {
		return err
	}
	return cw.waitReady(ctx, timeout)
}

// launch starts the worker's processes.
func (cw *hostWorker) launch() error {
	cw.starts++
	log := filepath.Join(cw.logs, fmt.Sprintf("%s-%d.log", cw.host, cw.starts))
	// In the worker's network namespace, unshare makes the rest of the
	// host: a mount namespace (its /etc/hosts), a UTS namespace (its
	// hostname) and a PID namespace whose first process is the worker;
	// --kill-child takes that namespace down when unshare is killed.
	argv := []string{"nsenter", "--net=" + cw.ns.path(), "--",
		"unshare", "--mount", "--uts", "--pid", "--fork", "--kill-child", "--mount-proc", "--",
		"sh", "-c", `mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"`, "sh", cw.ns.Hosts, cw.host}
	p, err := startProc(cw.host, log, cw.env, append(argv, cw.command...)...)
	if err != nil {
		return err
	}
	cw.proc, cw.killed = p, false
	info("%s: pid %d, %s in network namespace %s, log %s", cw.host, p.cmd.Process.Pid, workerAddr(cw.i), cw.ns.path(), log)
	return nil
}

// waitReady waits until the worker says it is ready.
func (cw *hostWorker) waitReady(ctx context.Context, timeout time.Duration) error {
	return poll(ctx, timeout, time.Second, cw.host+" to be ready", cw.alive, cw.ready)
}

// logSays is a ready check: the worker's current log has line.
func (cw *hostWorker) logSays(line string) func() (bool, string, error) {
	return func() (bool, string, error) {
		data, _ := os.ReadFile(cw.proc.log)
		if strings.Contains(string(data), line) {
			return true, "", nil
		}
		return false, "no \"" + line + "\" in its log yet", nil
	}
}

// runToExit starts the worker and waits for it to exit on its own (a
// start the control plane refuses), within timeout; its log.
func (cw *hostWorker) runToExit(ctx context.Context, timeout time.Duration) (string, error) {
	if err := cw.launch(); err != nil {
		return "", err
	}
	defer func() { cw.killed = true }() // not running: alive must not report it
	select {
	case <-cw.proc.done:
	case <-time.After(timeout):
		cw.proc.stop(10 * time.Second)
		return cw.proc.tail(40), fmt.Errorf("%s %s was meant to exit on its own, but still ran after %s", cw.kind, cw.host, timeout)
	case <-ctx.Done():
		cw.proc.stop(10 * time.Second)
		return "", ctx.Err()
	}
	data, err := os.ReadFile(cw.proc.log)
	return string(data), err
}

func (cw *hostWorker) alive() error {
	if cw.killed || cw.proc == nil {
		return nil
	}
	if done, err := cw.proc.exited(); done {
		return fmt.Errorf("%s %s exited (%v); the end of its log (%s):\n%s", cw.kind, cw.host, err, cw.proc.log, cw.proc.tail(40))
	}
	return nil
}

// kill is the host dying: SIGKILL to the namespace's holder, which takes
// every process of the worker with it (no warm shutdown, no cleanup, no
// message acknowledged). It fails unless the worker's namespace is empty
// afterwards.
func (cw *hostWorker) kill(ctx context.Context) error {
	if err := syscall.Kill(cw.proc.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill -9 %s (pid %d): %w", cw.host, cw.proc.cmd.Process.Pid, err)
	}
	cw.killed = true
	<-cw.proc.done
	return poll(ctx, time.Minute, 200*time.Millisecond, "every process of "+cw.host+" to be gone", nil, func() (bool, string, error) {
		pids, err := pidsIn(cw.ns)
		if err != nil {
			return false, "", err
		}
		if len(pids) > 0 {
			return false, "still running: " + strings.Join(pids, " "), nil
		}
		return true, "", nil
	})
}

func (cw *hostWorker) stop() {
	if cw.proc == nil || cw.killed {
		return
	}
	cw.proc.stop(30 * time.Second)
	info("%s stopped", cw.host)
}

// logText is everything the worker's logs say, over all its starts.
func (cw *hostWorker) logText() string {
	var all []string
	for i := 1; i <= cw.starts; i++ {
		data, _ := os.ReadFile(filepath.Join(cw.logs, fmt.Sprintf("%s-%d.log", cw.host, i)))
		all = append(all, string(data))
	}
	return strings.Join(all, "\n")
}
