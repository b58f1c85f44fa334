//go:build linux && (amd64 || arm64)

package exitorder

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// childEnv makes the test binary the process under test: it starts a
// holder, says so on fd 3, closes its stdout and exits once its stdin
// closes.
const childEnv = "EXITORDER_TEST_CHILD"

func init() {
	if os.Getenv(childEnv) != "1" {
		return
	}
	holder, err := Hold()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	os.Stdout.Close()
	// Only now that stdout is closed here does the parent look at it.
	fmt.Fprintf(os.NewFile(3, "report"), "%d\n", holder)
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// TestHolderKeepsOutputOpenUntilExitIsReported plays Airflow's
// supervisor: it watches the child's stdout and, at its EOF, asks whether
// the child has exited without waiting (waitpid WNOHANG). The holder
// makes the answer yes every time; without it the answer can be no, and
// Airflow's supervisor then sleeps 5 s before it asks again.
func TestHolderKeepsOutputOpenUntilExitIsReported(t *testing.T) {
	// The holder outlives the child and is reparented to its nearest
	// subreaper: this test, which reaps it to see that it ran and ended.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		outR, outW, _ := os.Pipe()
		repR, repW, _ := os.Pipe()
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), childEnv+"=1")
		cmd.Stdout, cmd.ExtraFiles = outW, []*os.File{repW}
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		outW.Close()
		repW.Close()
		line, err := bufio.NewReader(repR).ReadString('\n')
		holder, _ := strconv.Atoi(strings.TrimSpace(line))
		if err != nil || holder <= 0 {
			cmd.Wait()
			t.Fatalf("run %d: the child reported no holder (%q, %v); stderr: %s", i, line, err, stderr.String())
		}
		// The child has closed its stdout; its holder's copy keeps the
		// pipe open, so there is no hang-up to see yet.
		fds := []unix.PollFd{{Fd: int32(outR.Fd()), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, 0); err != nil || n != 0 {
			t.Fatalf("run %d: the child's stdout is at EOF while the child runs (poll %d %v, revents %#x): nothing held it open", i, n, err, fds[0].Revents)
		}
		stdin.Close() // the child exits
		if _, err := io.Copy(io.Discard, outR); err != nil {
			t.Fatal(err)
		}
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil {
			t.Fatal(err)
		}
		// With WNOHANG, Linux reports no waitable child with si_signo 0.
		if info.Signo != int32(unix.SIGCHLD) {
			t.Fatalf("run %d: the child's stdout reached EOF before waitpid could report its exit", i)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("run %d: %v; stderr: %s", i, err, stderr.String())
		}
		var ws unix.WaitStatus
		if _, err := unix.Wait4(holder, &ws, 0, nil); err != nil || !ws.Exited() || ws.ExitStatus() != 0 {
			t.Fatalf("run %d: reaping the holder %d: %v, status %v", i, holder, err, ws)
		}
		outR.Close()
		repR.Close()
	}
}
