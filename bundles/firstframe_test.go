package bundles

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/testing/deadline"
)

func envOf(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

// Issue 38, item 8: a supervisor that accepted both connections and never
// sent the first frame held the bundle 15 minutes. The wait is bounded by
// the slowest start Airflow's settings allow (the operator may set it);
// here the operator's 300ms, which the runtime ignored before the fix
// (it waited until the test's context ended).
func TestSilentSupervisorIsGivenUpOn(t *testing.T) {
	commL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logsL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer commL.Close()
	defer logsL.Close()
	accepted := make(chan net.Conn, 2)
	for _, l := range []net.Listener{commL, logsL} {
		go func() {
			if c, err := l.Accept(); err == nil {
				accepted <- c // held open, and never written to
			}
		}()
	}
	ctx := deadline.Context(t)
	cfg := serveConfig{lookupEnv: envOf(map[string]string{firstFrameTimeoutEnv: "300ms"}), cancelGrace: time.Second}
	err = testBundle().serve(ctx, commL.Addr().String(), logsL.Addr().String(), cfg)
	for range 2 {
		c := <-accepted // the runtime connected to both before it gave up
		c.Close()
	}
	var pe *protocolError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "sent no first frame within 300ms") || !strings.Contains(err.Error(), firstFrameTimeoutEnv) {
		t.Fatalf("want a protocol error saying no first frame came within 300ms, naming the setting; got %v", err)
	}
}

func TestFirstFrameBoundFollowsAirflowsSettings(t *testing.T) {
	for name, c := range map[string]struct {
		env     map[string]string
		want    time.Duration
		warning string
	}{
		// 5 attempts of 2 x 5 s, waits of 1+2+4+8 s, 30 s slack: 95 s, so
		// the floor.
		"Airflow's defaults": {nil, 2 * time.Minute, ""},
		// make airflow-e2e's supervisor: 5 x 120 + 15 + 30.
		"a 60 s timeout": {map[string]string{"AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60"}, 645 * time.Second, ""},
		"3 retries of 30 s, waits capped at 1 s": {map[string]string{
			"AIRFLOW__WORKERS__EXECUTION_API_RETRIES": "3", "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30.0",
			"AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MAX": "1",
		}, 3*60*time.Second + 2*time.Second + 30*time.Second, ""},
		"the operator's bound":     {map[string]string{firstFrameTimeoutEnv: "20m", "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60"}, 20 * time.Minute, ""},
		"a bad Airflow setting":    {map[string]string{"AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "soon"}, 2 * time.Minute, `AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT="soon" is not a number`},
		"a bad operator's setting": {map[string]string{firstFrameTimeoutEnv: "ages"}, 2 * time.Minute, firstFrameTimeoutEnv + `="ages" is not a positive duration`},
	} {
		got, warning := firstFrameTimeout(envOf(c.env))
		if got != c.want || !strings.Contains(warning, c.warning) || (c.warning == "") != (warning == "") {
			t.Errorf("%s: %s, %q; want %s, %q", name, got, warning, c.want, c.warning)
		}
	}
}
