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

// celeryWorker is one `airflow celery worker` on a host of its own: its
// own network namespace (reaching the control plane over the bridge), UTS
// namespace (its hostname, which Airflow records as the task's hostname)
// and PID namespace (so killing its first process kills everything on the
// "host": the Celery pool, the task supervisors and the bundles they
// forked), and its own directories: Airflow home and task logs, Dags
// folder, executables_root with its copy of the bundles, and state.
type celeryWorker struct {
	i           int
	host        string
	ns          namespace
	root        string // its directories live under here
	home        string
	dags        string
	executables string
	state       string
	env         []string // set by the caller before start
	bin         string   // the venv's airflow
	logs        string
	concurrency int

	proc   *proc
	starts int
	killed bool // killed on purpose and not restarted
}

func newCeleryWorker(w *workdir, ns namespace, i int, airflowBin string, concurrency int) (*celeryWorker, error) {
	cw := &celeryWorker{i: i, host: workerHost(i), ns: ns, root: filepath.Join(w.root, workerHost(i)),
		bin: airflowBin, logs: w.logs, concurrency: concurrency}
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

// start runs the worker (again, after a kill) and waits until Celery says
// it is ready to take tasks.
func (cw *celeryWorker) start(ctx context.Context, timeout time.Duration) error {
	if err := cw.launch(); err != nil {
		return err
	}
	return cw.waitReady(ctx, timeout)
}

// launch starts the worker's processes.
func (cw *celeryWorker) launch() error {
	cw.starts++
	log := filepath.Join(cw.logs, fmt.Sprintf("%s-%d.log", cw.host, cw.starts))
	// In the worker's network namespace, unshare makes the rest of the
	// host: a mount namespace (its /etc/hosts), a UTS namespace (its
	// hostname) and a PID namespace whose first process is the worker;
	// --kill-child takes that namespace down when unshare is killed.
	argv := []string{"nsenter", "--net=" + cw.ns.path(), "--",
		"unshare", "--mount", "--uts", "--pid", "--fork", "--kill-child", "--mount-proc", "--",
		"sh", "-c", `mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"`, "sh", cw.ns.Hosts, cw.host,
		cw.bin, "celery", "worker", "--queues", celeryWorkerQueues, "--celery-hostname", cw.host,
		"--concurrency", fmt.Sprint(cw.concurrency)}
	p, err := startProc(cw.host, log, cw.env, argv...)
	if err != nil {
		return err
	}
	cw.proc, cw.killed = p, false
	info("%s: pid %d, %s in network namespace %s, log %s", cw.host, p.cmd.Process.Pid, workerAddr(cw.i), cw.ns.path(), log)
	return nil
}

// waitReady waits until the worker's log says Celery is ready.
func (cw *celeryWorker) waitReady(ctx context.Context, timeout time.Duration) error {
	ready := "celery@" + cw.host + " ready."
	return poll(ctx, timeout, time.Second, cw.host+" to be ready", cw.alive, func() (bool, string, error) {
		data, _ := os.ReadFile(cw.proc.log)
		if strings.Contains(string(data), ready) {
			return true, "", nil
		}
		return false, "no \"" + ready + "\" in its log yet", nil
	})
}

func (cw *celeryWorker) alive() error {
	if cw.killed || cw.proc == nil {
		return nil
	}
	if done, err := cw.proc.exited(); done {
		return fmt.Errorf("Celery worker %s exited (%v); the end of its log (%s):\n%s", cw.host, err, cw.proc.log, cw.proc.tail(40))
	}
	return nil
}

// kill is the host dying: SIGKILL to the namespace's holder, which takes
// every process of the worker with it (no warm shutdown, no cleanup, no
// message acknowledged). It fails unless the worker's namespace is empty
// afterwards.
func (cw *celeryWorker) kill(ctx context.Context) error {
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

func (cw *celeryWorker) stop() {
	if cw.proc == nil || cw.killed {
		return
	}
	cw.proc.stop(30 * time.Second)
	info("%s stopped", cw.host)
}

// logText is everything the worker's Celery logs say, over all its starts.
func (cw *celeryWorker) logText() string {
	var all []string
	for i := 1; i <= cw.starts; i++ {
		data, _ := os.ReadFile(filepath.Join(cw.logs, fmt.Sprintf("%s-%d.log", cw.host, i)))
		all = append(all, string(data))
	}
	return strings.Join(all, "\n")
}
