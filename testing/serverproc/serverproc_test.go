package serverproc

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestStartReturnsOnceReady(t *testing.T) {
	calls := 0
	p, err := Start("sleeper", exec.Command("sleep", "100"), time.Minute, func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if calls != 3 {
		t.Fatalf("ready called %d times, want 3", calls)
	}
}

func TestStartReportsAServerThatExits(t *testing.T) {
	_, err := Start("quitter", exec.Command("sh", "-c", "echo bye; exit 3"), time.Minute, func() error { return errors.New("not yet") })
	if err == nil || !strings.Contains(err.Error(), "quitter exited before it served") || !strings.Contains(err.Error(), "bye") {
		t.Fatalf("Start = %v, want the exit and the server's output", err)
	}
}

func TestStartStopsAServerThatNeverAnswers(t *testing.T) {
	cmd := exec.Command("sleep", "100")
	_, err := Start("mute", cmd, time.Millisecond, func() error { return errors.New("connection refused") })
	if err == nil || !strings.Contains(err.Error(), "mute did not answer within 1ms (last error: connection refused)") {
		t.Fatalf("Start = %v, want the timeout with the last error", err)
	}
	// Stop waited for the process: its state is known, and it was killed.
	if cmd.ProcessState == nil || cmd.ProcessState.Success() {
		t.Fatalf("the server was not stopped: %v", cmd.ProcessState)
	}
}
