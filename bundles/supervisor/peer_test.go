package supervisor

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// Issue 19, hole 1: the supervisor accepted the first connection on each
// socket, so a local process that polled for its ports (they are in the
// child's argv and /proc/net/tcp) got StartupDetails and could ask for any
// connection's password, and the real task failed. Here the bundle is held
// back by a wrapper until an outside process (the test itself, not a
// descendant of the child) has connected to both ports; the supervisor
// must refuse it unread and serve the real task. With `fork`, the wrapper
// runs the bundle as its child instead of exec'ing it, so the connection
// comes from a descendant of the process the supervisor started, which
// Airflow accepts and so must we.
func TestSupervisorServesOnlyItsChildsProcessTree(t *testing.T) {
	for _, mode := range []string{"exec", "fork"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			argsFifo, goFifo := filepath.Join(dir, "args"), filepath.Join(dir, "go")
			for _, f := range []string{argsFifo, goFifo} {
				if err := syscall.Mkfifo(f, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			launch := `exec "$BUNDLE" "$@"`
			if mode == "fork" {
				launch = `"$BUNDLE" "$@"; exit $?`
			}
			wrapper := filepath.Join(dir, "wrapper")
			script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$DIR/args\"\nread _ < \"$DIR/go\"\n" + launch + "\n"
			if err := os.WriteFile(wrapper, []byte(script), 0o700); err != nil {
				t.Fatal(err)
			}
			s, logs := newSup(t, "DIR="+dir, "BUNDLE="+bundleBin)
			s.Executable = wrapper
			type outcome struct {
				res Result
				err error
			}
			done := make(chan outcome, 1)
			ctx := deadline.Context(t)
			go func() {
				res, err := s.RunTask(ctx, TaskRequest{DagID: "e2e", TaskID: "echo", Conf: map[string]any{"times": 2}})
				done <- outcome{res, err}
			}()

			// The attacker: read the ports from the child's argv, connect first.
			args, err := os.ReadFile(argsFifo)
			if err != nil {
				t.Fatal(err)
			}
			var attack []net.Conn
			for _, a := range strings.Fields(string(args)) {
				for _, flag := range []string{"--comm=", "--logs="} {
					if addr, ok := strings.CutPrefix(a, flag); ok {
						c, err := net.Dial("tcp", addr)
						if err != nil {
							t.Fatalf("the attacker could not even connect to %s: %v", addr, err)
						}
						attack = append(attack, c)
					}
				}
			}
			if len(attack) != 2 {
				t.Fatalf("want --comm and --logs in the child's argv, got %q", args)
			}
			// Let the bundle start; its connections queue behind the attacker's.
			if err := os.WriteFile(goFifo, []byte("go\n"), 0o600); err != nil {
				t.Fatal(err)
			}

			for i, c := range attack {
				// The guard of a failure only: a refused connection ends at once.
				c.SetReadDeadline(deadline.Of(t))
				p, err := protocol.ReadFrame(c)
				if !errors.Is(err, io.EOF) && !isReset(err) {
					m, _ := protocol.DecodeMessage(p)
					t.Errorf("the outside process's connection %d got %q (%v), want it closed unread", i, m.Type(), err)
				}
				c.Close() // so a supervisor serving it (the hole) ends too
			}
			out := <-done
			if out.err != nil || out.res.State != StateSuccess {
				t.Fatalf("the real task should run: %v, state %s\n%s", out.err, out.res.State, logs)
			}
			for _, socket := range []string{"comm", "logs"} {
				if want := "refused a connection to the " + socket + " socket"; !strings.Contains(logs.String(), want) {
					t.Errorf("the supervisor should say it %s:\n%s", want, logs)
				}
			}
		})
	}
}
