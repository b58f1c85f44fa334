package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// The network of a run whose workers are hosts of their own (Celery, Edge):
// one network namespace for the control plane (Airflow's scheduler,
// dag-processor and api-server, PostgreSQL, Redis for Celery, the S3 server
// and the fake Modal server; the driver itself runs there too) and one per
// worker, each worker joined to the control plane by a veth pair on a
// bridge. The workers share nothing with the control plane but that link:
// not its loopback, not its /etc/hosts.
//
// Each namespace is held by a process of its own (unshare --net sleep),
// entered through /proc/<pid>/ns/net, never named under /run/netns: the
// network lives exactly as long as the driver (the holders die with it)
// and other users of ip netns on the machine can neither see nor remove
// it. The addresses can be fixed because they exist only inside these
// namespaces. 172.21.0.1 is the control plane's because Modal's Go client
// trusts a plaintext command router only on localhost or that address
// (fakemodal.LocalAddr), so the fake Modal server serves the workers
// across the bridge as it serves a local client.
const (
	controlAddr = "172.21.0.1"
	controlHost = "airflow-control"
)

// workerAddr and workerHost are worker i's (1-based) address and hostname.
func workerAddr(i int) string { return fmt.Sprintf("172.21.0.%d", 10+i) }
func workerHost(i int) string { return fmt.Sprintf("worker%d", i) }

// network is the namespaces of one run: each one's holder and hosts file.
type network struct {
	Control namespace   `json:"control"`
	Workers []namespace `json:"workers"` // worker i's is Workers[i-1]
	dir     string      // hosts files and this description, as JSON
	holders []*exec.Cmd // set in the part that made them
}

type namespace struct {
	Holder int    `json:"holder"` // pid of the process that keeps it
	Hosts  string `json:"hosts"`  // the /etc/hosts its processes see
}

func (ns namespace) path() string { return fmt.Sprintf("/proc/%d/ns/net", ns.Holder) }

// enter is argv run in the namespace, in a mount namespace of its own
// that sees the namespace's hosts file as /etc/hosts (the api-server
// fetches a task's log from the worker's log server by the hostname the
// task ran on).
func (ns namespace) enter(argv ...string) []string {
	return append([]string{"nsenter", "--net=" + ns.path(), "--", "unshare", "--mount", "--",
		"sh", "-c", `mount --bind "$1" /etc/hosts && shift && exec "$@"`, "sh", ns.Hosts}, argv...)
}

// createNetwork starts the holders, makes the bridge and the links, and
// writes the hosts files and the description (network.json) into dir.
func createNetwork(dir string, workers int) (n *network, err error) {
	for _, tool := range []string{"ip", "unshare", "nsenter", "sleep"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s is missing: scripts/ensure-tools.sh celery installs it (iproute2, util-linux)", tool)
		}
	}
	n = &network{dir: dir}
	defer func() {
		if err != nil {
			n.remove()
		}
	}()
	hosts := "127.0.0.1 localhost\n::1 localhost\n" + controlAddr + " " + controlHost + "\n"
	for i := 1; i <= workers; i++ {
		hosts += workerAddr(i) + " " + workerHost(i) + "\n"
	}
	hold := func(name, extra string) (namespace, error) {
		cmd := exec.Command("unshare", "--net", "--", "sleep", "infinity")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return namespace{}, fmt.Errorf("starting the holder of the %s network namespace: %w", name, err)
		}
		n.holders = append(n.holders, cmd)
		ns := namespace{Holder: cmd.Process.Pid, Hosts: filepath.Join(dir, "hosts-"+name)}
		if err := os.WriteFile(ns.Hosts, []byte(hosts+extra), 0o644); err != nil {
			return ns, err
		}
		return ns, nil
	}
	// The control plane keeps the machine's hostname: resolve it here
	// rather than through a DNS server it cannot reach.
	own := ""
	if h, err := os.Hostname(); err == nil {
		own = "127.0.1.1 " + h + "\n"
	}
	if n.Control, err = hold("control", own); err != nil {
		return n, err
	}
	for i := 1; i <= workers; i++ {
		ns, err := hold(workerHost(i), "")
		if err != nil {
			return n, err
		}
		n.Workers = append(n.Workers, ns)
	}
	in := func(ns namespace, args ...string) []string {
		return append([]string{"nsenter", "--net=" + ns.path(), "--", "ip"}, args...)
	}
	steps := [][]string{
		in(n.Control, "link", "set", "lo", "up"),
		in(n.Control, "link", "add", "br0", "type", "bridge"),
		in(n.Control, "addr", "add", controlAddr+"/24", "dev", "br0"),
		in(n.Control, "link", "set", "br0", "up"),
	}
	for i, ns := range n.Workers {
		end := fmt.Sprintf("vw%d", i+1)
		steps = append(steps,
			in(n.Control, "link", "add", end, "type", "veth", "peer", "name", "eth0", "netns", strconv.Itoa(ns.Holder)),
			in(n.Control, "link", "set", end, "master", "br0", "up"),
			in(ns, "link", "set", "lo", "up"),
			in(ns, "addr", "add", workerAddr(i+1)+"/24", "dev", "eth0"),
			in(ns, "link", "set", "eth0", "up"),
		)
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return n, fmt.Errorf("%s: %v: %s", strings.Join(s, " "), err, strings.TrimSpace(string(out)))
		}
	}
	data, _ := json.Marshal(n)
	return n, os.WriteFile(filepath.Join(dir, "network.json"), data, 0o644)
}

// exitStatus is the second part's exit status, passed on by the first.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// runInNetwork is the first part of a run whose workers are hosts of their
// own: it makes the control plane's namespace and one per worker, runs
// this driver again inside the control plane's (with -netns naming the
// network's description), and removes the network when that ends. A
// signal is passed on, so the second part stops what it started first.
func runInNetwork(ctx context.Context, o options, workers int) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("EXECUTOR=%s makes a network namespace per worker, which needs root: run it as root, or with sudo (scripts/airflow-e2e.sh uses sudo when it is there)", o.executor)
	}
	dir, err := os.MkdirTemp("", "airflow-e2e-net-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	step("creating the network: a namespace for the control plane (%s) and one for each of %d workers, joined by a bridge", controlAddr, workers)
	n, err := createNetwork(dir, workers)
	if err != nil {
		return err
	}
	defer func() {
		step("removing the network namespaces")
		n.remove()
	}()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	argv := n.Control.enter(append([]string{self}, os.Args[1:]...)...)
	argv = append(argv, "-netns", dir)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the driver inside the control plane's namespace: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGTERM) // it stops what it started, then exits
		err = <-done
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return exitStatus(ee.ExitCode())
	}
	return err
}

// loadNetwork reads the description the first part wrote.
func loadNetwork(dir string) (*network, error) {
	data, err := os.ReadFile(filepath.Join(dir, "network.json"))
	if err != nil {
		return nil, fmt.Errorf("reading the network's description: %w", err)
	}
	n := &network{dir: dir}
	if err := json.Unmarshal(data, n); err != nil {
		return nil, err
	}
	if len(n.Workers) == 0 {
		return nil, errors.New("the network's description names no worker namespace")
	}
	return n, nil
}

// remove ends the holders, which takes the namespaces and their links
// with them.
func (n *network) remove() {
	for _, h := range n.holders {
		_ = h.Process.Kill()
		_ = h.Wait()
	}
	n.holders = nil
}

// pidsIn lists the processes in ns other than its holder.
func pidsIn(ns namespace) ([]string, error) {
	want, err := os.Readlink(ns.path())
	if err != nil {
		return nil, fmt.Errorf("the namespace's holder (pid %d) is gone: %w", ns.Holder, err)
	}
	entries, _ := os.ReadDir("/proc")
	var pids []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == ns.Holder {
			continue
		}
		if got, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); err == nil && got == want {
			pids = append(pids, e.Name())
		}
	}
	return pids, nil
}
