package local

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"
	"github.com/airflow-sandbox/airflow-go-worker/testing/waitwriter"
)

// Issue 38, item 8: the filter listed the worker's addresses when a
// command's network started, so an address the worker gained during a
// long command was reachable from an open sandbox until that command
// ended (a server on the worker's 0.0.0.0 answered it there). Now the
// filter follows the worker's addresses as the kernel announces them.
// The test gives the worker an address (in a network namespace of the
// test's own) while a command runs (after its network started: it has reached the stand-in
// internet), checks that the worker itself reaches its wildcard server
// there, waits until the filter has taken it, and only then lets the
// command dial it.
func TestNewWorkerAddressIsFilteredDuringACommand(t *testing.T) {
	if !needRoot(t) || !inPrivateNetwork(t) {
		return
	}
	in := newInternet(t)
	public := in.listen(t, in.public)
	wild := serve(t, mustListen(t, "0.0.0.0:0"))
	port := wild.Addr().(*net.TCPAddr).Port
	const newAddr = "198.51.100.7" // TEST-NET-2: an ordinary address, in no blocked range
	d := newTestDriver(t)
	took := make(chan []netip.Prefix, 8)
	d.egressUpdated = func(p []netip.Prefix) { took <- p }
	sb := create(t, d, sandbox.Spec{Network: sandbox.NetworkPolicy{Open: true}})

	dial := func(addr string) string {
		return fmt.Sprintf("timeout 20 bash -c 'exec 3<>/dev/tcp/%s' 2>/dev/null && echo connected || echo refused", strings.ReplaceAll(addr, ":", "/"))
	}
	script := "echo internet $(" + dial(public.Addr().String()) + "); read go; echo new $(" + dial(net.JoinHostPort(newAddr, fmt.Sprint(port))) + ")"
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	out := waitwriter.New("internet ")
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(t.Context(), script, sandbox.ExecOptions{Timeout: 2 * time.Minute, Stdin: stdinR, Stdout: out, Stderr: out})
		done <- err
	}()
	select {
	case <-out.Seen():
	case err := <-done:
		t.Fatalf("the command ended before it dialled: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "internet connected") {
		t.Fatalf("the open-network command did not reach the stand-in internet, so its network did not start: %q", out.String())
	}

	// On the worker's side of the veth to the stand-in internet (this
	// kernel may have no dummy interfaces).
	if o, err := exec.Command("ip", "addr", "add", newAddr+"/32", "dev", "afgw0").CombinedOutput(); err != nil {
		t.Fatalf("giving the worker %s: %v\n%s", newAddr, err, o)
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort(newAddr, fmt.Sprint(port)), 10*time.Second)
	if err != nil {
		t.Fatalf("the worker itself cannot reach its wildcard server at its new address, so the test proves nothing: %v", err)
	}
	c.Close()
	want := netip.MustParsePrefix(newAddr + "/32")
	for got := false; !got; {
		got = slices.Contains(deadline.Wait(t, "the running command's filter to take the worker's new address "+newAddr, took), want)
	}
	if _, err := io.WriteString(stdinW, "go\n"); err != nil {
		t.Fatal(err)
	}
	stdinW.Close() // the command's stdin ends: Exec returns once it has
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "new refused") {
		t.Errorf("the running command reached the worker's new address %s: %q", newAddr, out.String())
	}
	if n := wild.accepted.Load(); n != 1 {
		t.Errorf("the worker's wildcard server accepted %d connections; want the worker's own 1", n)
	}
}
