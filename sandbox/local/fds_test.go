package local

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// Issue 19, hole 6: a descriptor the worker inherited without
// close-on-exec (from Airflow's supervisor, a Celery worker, a shell)
// reached every sandbox command: bwrap passes on whatever it gets. Here
// the worker holds such a pipe; no process of a sandbox may hold it.
func TestWorkerDescriptorsNeverReachASandbox(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	// Inherited descriptors look like this: a high number (low ones are
	// taken by what bwrap is passed) without close-on-exec (F_DUPFD
	// leaves it off).
	fd, err := unix.FcntlInt(w.Fd(), unix.F_DUPFD, 500)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if flags, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); flags&unix.FD_CLOEXEC != 0 {
		t.Fatal("the marker descriptor has close-on-exec; it proves nothing")
	}
	marker, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		t.Fatal(err)
	}
	d := newTestDriver(t)
	for _, spec := range []sandbox.Spec{{}, {Network: sandbox.NetworkPolicy{Open: true}}} {
		sb := create(t, d, spec)
		// Every process of the sandbox: its init and the command's shell.
		_, out, _ := run(t, sb, `for f in /proc/[0-9]*/fd/*; do printf '%s %s\n' "$f" "$(readlink "$f")"; done`, time.Minute)
		if !strings.Contains(out, "/fd/2 ") {
			t.Fatalf("listed no descriptors, so the check proves nothing:\n%s", out)
		}
		if strings.Contains(out, marker) {
			t.Errorf("the worker's descriptor %s reached the sandbox (network open: %v):\n%s", marker, spec.NetworkPolicy().Open, out)
		}
	}
}
