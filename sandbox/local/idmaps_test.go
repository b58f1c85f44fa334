package local

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// unmappedNamespaces starts a process in a user and a network namespace
// of its own whose user namespace has no uid or gid map yet, as bwrap's
// are between bringing their loopback up and writing the maps, and
// returns its pid. It lives until the test ends.
func unmappedNamespaces(t *testing.T) int {
	t.Helper()
	needTools(t, "unshare")
	holder := exec.Command("unshare", "--user", "--net", "--", "sh", "-c", "echo ready; exec cat")
	holder.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatalf("starting a process in namespaces of its own: %v", err)
	}
	t.Cleanup(func() { stdin.Close(); holder.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("the namespaces' process did not start: %q %v", line, err)
	}
	return holder.Process.Pid
}

// mapRoot writes the uid and gid maps of process pid's user namespace,
// mapping root to root, as bwrap does for a root worker.
func mapRoot(pid int) error {
	for _, f := range []string{"uid_map", "gid_map"} {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/%s", pid, f), []byte("0 0 1\n"), 0); err != nil {
			return err
		}
	}
	return nil
}

// Issue 40: make test on a busy 2-core machine once failed to install an
// egress filter, "netlink: operation not permitted", and passed alone.
// bwrap's init brings its network namespace's loopback up before it
// writes its user namespace's maps; the worker waited for the loopback
// only, and nsenter joined the namespace in between. A process that joins
// a user namespace has every capability there until it executes a
// program, which then keeps them only if its uid is mapped (to root): the
// installer, executed unmapped, had none, and nftables refused its batch.
// The worker now waits for the maps too (waitIDMaps). Here the test holds
// the namespace unmapped as long as it likes: installed at once, the
// filter fails as it did under load; after the wait, which the test ends
// by mapping the namespace once the wait has looked and found no map, it
// installs.
func TestEgressInstallWaitsForTheIDMaps(t *testing.T) {
	if !needRoot(t) {
		return
	}
	d := newTestDriver(t)
	if err := d.egressSupport(); err != nil {
		t.Fatalf("this host cannot install the egress filter, so the test cannot show the race: %v", err)
	}
	pid := unmappedNamespaces(t)
	netns, userns, err := namespacesOf(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer netns.Close()
	defer userns.Close()
	plan, err := d.planFor(sandbox.Spec{Network: sandbox.NetworkPolicy{Open: true}})
	if err != nil {
		t.Fatal(err)
	}
	err = d.installEgress(netns, userns, plan, ids{})
	if err == nil || !strings.Contains(err.Error(), "operation not permitted") {
		t.Fatalf("installed into a namespace without maps, the filter should fail as issue 40's did (operation not permitted), so the test shows nothing; got %v", err)
	}
	t.Logf("before the maps, as issue 40 saw it: %v", err)

	looked := 0
	err = waitIDMaps(pid, func() {
		if looked++; looked == 1 {
			if err := mapRoot(pid); err != nil {
				t.Errorf("mapping the namespace: %v", err)
			}
		}
	})
	if err != nil || looked == 0 {
		t.Fatalf("waitIDMaps: %v, after %d looks without a map; want it to wait for the map the test writes", err, looked)
	}
	if err := d.installEgress(netns, userns, plan, ids{}); err != nil {
		t.Fatalf("once the namespace is mapped the filter should install: %v", err)
	}
}
