package local

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"golang.org/x/sys/unix"
)

// TestSeccompDeniesKernelAttackSurface calls denied syscalls directly
// through python3's ctypes (the shell cannot make raw syscalls).
func TestSeccompDeniesKernelAttackSurface(t *testing.T) {
	if seccompProgram() == nil {
		t.Skip("no seccomp filter on this architecture")
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("needs /usr/bin/python3 on the host to make raw syscalls; CI must install it (see .ci/run)")
		}
		t.Skip("needs /usr/bin/python3 on the host to make raw syscalls")
	}
	d := newTestDriver(t)
	sb := create(t, d, sandbox.Spec{})
	script := `import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
for nr in map(int, sys.argv[1:]):
    r = libc.syscall(nr, 0, 0, 0, 0, 0)
    print(nr, r, ctypes.get_errno())
`
	if err := sb.WriteFile(t.Context(), "probe.py", strings.NewReader(script), 0o644); err != nil {
		t.Fatal(err)
	}
	denied := map[int]string{unix.SYS_KEYCTL: "keyctl", unix.SYS_BPF: "bpf", unix.SYS_USERFAULTFD: "userfaultfd", unix.SYS_IO_URING_SETUP: "io_uring_setup", unix.SYS_PERF_EVENT_OPEN: "perf_event_open"}
	args := ""
	for nr := range denied {
		args += " " + itoa(nr)
	}
	// getpid (allowed) as a control: the probe itself works.
	res, out, errs := run(t, sb, "python3 probe.py"+args+" "+itoa(unix.SYS_GETPID), time.Minute)
	if res.ExitCode != 0 {
		t.Fatalf("probe failed: %s", errs)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("probe output %q", out)
		}
		name, isDenied := denied[atoi(f[0])]
		switch {
		case isDenied && (f[1] != "-1" || f[2] != itoa(int(unix.EPERM))):
			t.Errorf("%s: returned %s errno %s, want -1 EPERM", name, f[1], f[2])
		case !isDenied && f[1] == "-1":
			t.Errorf("getpid failed (errno %s): the filter denies too much", f[2])
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }
