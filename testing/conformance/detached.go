package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
	"github.com/airflow-sandbox/airflow-go-worker/testing/eventually"
)

// RunDetached checks a backend's detached commands the way a deferred task
// uses them (docs/deferral.md): a command started through one driver (the
// task's first run) is polled to its end through the other (resumes on
// other workers), each poll from the offsets the last one returned, so
// every byte of its output arrives once and in order, with its exit
// status; and StopDetached, asked through the second driver, ends the
// command and what it started. newPair returns two drivers of the backend
// under test that reach the same sandboxes, as two workers' would.
func RunDetached(t *testing.T, newPair func(t *testing.T) (first, second driver.Driver), opts Options) {
	opts.defaults()
	s := &suite{opts: opts}
	t.Run("PolledAcrossWorkers", func(t *testing.T) {
		first, second := newPair(t)
		s.testDetachedAcrossWorkers(t, first, second)
	})
	t.Run("StopEndsWhatTheCommandStarted", func(t *testing.T) {
		first, second := newPair(t)
		s.testDetachedStop(t, first, second)
	})
	t.Run("PollAfterDestroyIsGone", func(t *testing.T) {
		first, second := newPair(t)
		s.testDetachedGone(t, first, second)
	})
}

// testDetachedGone: a poll (a resume) that finds the sandbox destroyed
// while its command ran fails with ErrGone, which a deferred task reports
// as its sandbox gone; an id the sandbox never gave is ErrNotFound.
func (s *suite) testDetachedGone(t *testing.T, first, second driver.Driver) {
	sb, err := sandbox.NewBackend(first).Create(s.ctx(t), s.opts.Spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	id, err := sb.StartDetached(s.ctx(t), "sleep 600", sandbox.DetachedOptions{})
	if err != nil {
		t.Fatalf("start detached: %v", err)
	}
	other := sandbox.NewBackend(second).Open(sb.ID())
	if st, err := other.PollDetached(s.ctx(t), id, sandbox.Offsets{}, 0); err != nil || !st.Running {
		t.Fatalf("the command before the destroy: %+v, %v", st, err)
	}
	if _, err := other.PollDetached(s.ctx(t), "00000000000000000000000000000abc", sandbox.Offsets{}, 0); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("polling a command the sandbox never ran: %v, want ErrNotFound", err)
	}
	if err := sb.Destroy(s.ctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := other.PollDetached(s.ctx(t), id, sandbox.Offsets{}, 0); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("polling after the destroy: %v, want ErrGone", err)
	}
}

// detachedOutput is what the command below writes once released.
func detachedOutput(stream string) string {
	var b strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&b, "%s line %d of a detached command\n", stream, i)
	}
	return b.String() + stream + " ends without a newline"
}

// combinedOutput is both streams of the command below as one, in the
// order it writes them.
func combinedOutput() string {
	var b strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&b, "stdout line %d of a detached command\nstderr line %d of a detached command\n", i, i)
	}
	return b.String() + "stdout ends without a newline" + "stderr ends without a newline"
}

func (s *suite) testDetachedAcrossWorkers(t *testing.T, first, second driver.Driver) {
	sb := s.create(t, first, nil)
	// It prints "started", waits to be released (so the polls below
	// certainly see it running), then prints its lines a few at a time.
	cmd := `echo "started $DETACHED_VAR in $(pwd)"
while [ ! -f /tmp/release ]; do sleep 0.05; done
i=0; while [ $i -lt 40 ]; do i=$((i+1)); echo "stdout line $i of a detached command"; echo "stderr line $i of a detached command" >&2; [ $((i % 8)) = 0 ] && sleep 0.1; done
printf 'stdout ends without a newline'; printf 'stderr ends without a newline' >&2
exit 3`
	s.mustSucceed(t, sb, "mkdir -p sub")
	id, err := sb.StartDetached(s.ctx(t), cmd, sandbox.DetachedOptions{Env: map[string]string{"DETACHED_VAR": "v 1"}, Workdir: "sub"})
	if err != nil {
		t.Fatalf("start detached: %v", err)
	}
	// Each poll alternates between the two workers' handles and reads at
	// most 100 bytes of each stream, so the output arrives in many pieces.
	handles := []*sandbox.Sandbox{sandbox.NewBackend(first).Open(sb.ID()), sandbox.NewBackend(second).Open(sb.ID())}
	var stdout, stderr bytes.Buffer
	var at sandbox.Offsets
	polls, sawRunning := 0, false
	poll := func() sandbox.DetachedStatus {
		t.Helper()
		st, err := handles[polls%2].PollDetached(s.ctx(t), id, at, 100)
		if err != nil {
			t.Fatalf("poll %d: %v", polls, err)
		}
		polls++
		if st.Next.Stdout != at.Stdout+int64(len(st.Stdout)) || st.Next.Stderr != at.Stderr+int64(len(st.Stderr)) {
			t.Fatalf("poll %d from %+v read %d/%d bytes but says the next starts at %+v", polls, at, len(st.Stdout), len(st.Stderr), st.Next)
		}
		stdout.Write(st.Stdout)
		stderr.Write(st.Stderr)
		at, sawRunning = st.Next, sawRunning || st.Running
		return st
	}
	eventually.True(t, "the detached command to print that it started", func() bool {
		return poll().Running && strings.Contains(stdout.String(), "\n")
	})
	s.mustSucceed(t, handles[1], "touch /tmp/release")
	var last sandbox.DetachedStatus
	eventually.True(t, "the detached command to end and its output to be read", func() bool {
		last = poll()
		return !last.Running && len(last.Stdout) == 0 && len(last.Stderr) == 0
	})
	wantOut, wantErr := detachedOutput("stdout"), detachedOutput("stderr")
	if s.opts.DetachedCombinedOutput {
		wantOut, wantErr = combinedOutput(), ""
	}
	wantOut = "started v 1 in " + strings.TrimSuffix(s.mustSucceed(t, sb, "cd sub && pwd"), "\n") + "\n" + wantOut
	if stdout.String() != wantOut {
		t.Errorf("stdout read across %d polls:\n%q\nwant\n%q", polls, stdout.String(), wantOut)
	}
	if stderr.String() != wantErr {
		t.Errorf("stderr read across %d polls:\n%q\nwant\n%q", polls, stderr.String(), wantErr)
	}
	if last.ExitCode != 3 || !sawRunning {
		t.Errorf("exit code %d (want 3), seen running %v", last.ExitCode, sawRunning)
	}
	// A poll at the end reads nothing more, from either worker.
	for _, h := range handles {
		if st, err := h.PollDetached(s.ctx(t), id, at, 0); err != nil || st.Running || len(st.Stdout)+len(st.Stderr) != 0 || st.ExitCode != 3 {
			t.Errorf("a poll after the end: %+v, %v", st, err)
		}
	}
}

func (s *suite) testDetachedStop(t *testing.T, first, second driver.Driver) {
	sb := s.create(t, first, nil)
	// The command starts a child that holds a pipe open (fd 3 on a FIFO,
	// opened read-write so that nothing blocks) and waits. Once every
	// holder has ended, a non-blocking read of the FIFO sees its end
	// (dd succeeds); while one lives, it finds no data (EAGAIN).
	s.mustSucceed(t, sb, "mkfifo /tmp/held")
	id, err := sb.StartDetached(s.ctx(t), "exec 3<>/tmp/held; sleep 600 & echo child started; wait", sandbox.DetachedOptions{})
	if err != nil {
		t.Fatalf("start detached: %v", err)
	}
	other := sandbox.NewBackend(second).Open(sb.ID())
	eventually.True(t, "the detached command's child to start", func() bool {
		st, err := other.PollDetached(s.ctx(t), id, sandbox.Offsets{}, 0)
		return err == nil && st.Running && string(st.Stdout) == "child started\n"
	})
	held := "dd if=/tmp/held of=/dev/null iflag=nonblock count=1 2>/dev/null"
	if o := s.exec(t, other, held, sandbox.ExecOptions{}); o.res.ExitCode == 0 {
		t.Fatal("the FIFO reads as closed while the child holds it: the check below would prove nothing")
	}
	if err := other.StopDetached(s.ctx(t), id); err != nil {
		t.Fatalf("stop: %v", err)
	}
	var st sandbox.DetachedStatus
	eventually.True(t, "the stopped command to end", func() bool {
		st, err = other.PollDetached(s.ctx(t), id, sandbox.Offsets{}, 0)
		return err == nil && !st.Running
	})
	if st.ExitCode != 128+15 {
		t.Errorf("the stopped command's exit status is %d, want 143: ended by SIGTERM, as a shell reports it", st.ExitCode)
	}
	eventually.True(t, "the stopped command's child to end too (nothing holds the FIFO)", func() bool {
		return s.exec(t, other, held, sandbox.ExecOptions{}).res.ExitCode == 0
	})
}
