package exitorder

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// Exit codes of a bundle's command line.
const (
	OK      = 0
	Failure = 1 // protocol failure: Airflow records failed/up_for_retry
	Usage   = 2 // bad command line
)

// HolderEnv names the worker setting that turns the exit holder off
// ("off"); unset or "on" keeps it.
const HolderEnv = "AIRFLOW_GO_WORKER_EXIT_HOLDER"

// served is set when the runtime serves a task, so Exit knows the process
// is a task instance that Airflow's supervisor watches.
var served atomic.Bool

// MarkServed records that this process serves a task instance.
func MarkServed() { served.Store(true) }

// Exit ends the process with code, as a bundle's main must once it has run
// its command line (bundles.Main and cli.Main do). After serving a task it
// first starts an exit holder (Hold) that keeps the process's output open
// until Airflow's supervisor can see the exit: otherwise the supervisor
// can see the output end first and then sleep 5 s before it looks for the
// exit again (docs/ARCHITECTURE.md, start-up).
//
// The holder outlives the process by microseconds and is reaped by the
// worker's init. On a host whose PID 1 reaps only its own children (a
// container running Airflow as PID 1, without --init or dumb-init) every
// holder would stay a zombie: there the operator sets HolderEnv=off, and a
// task may again end up to 5 s late instead.
func Exit(code int) {
	if served.Load() {
		if on, warning := holderWanted(os.LookupEnv); warning != "" {
			fmt.Fprintf(os.Stderr, "airflow-go-worker: %s\n", warning)
		} else if on {
			// Without a holder the process exits as it always did; only a
			// failure this platform should not have is worth a line.
			if _, err := Hold(); err != nil && !errors.Is(err, errors.ErrUnsupported) {
				fmt.Fprintf(os.Stderr, "airflow-go-worker: %v; Airflow may notice this task ended up to min_heartbeat_interval (5 s) late\n", err)
			}
		}
	}
	os.Exit(code)
}

// holderWanted reads HolderEnv. A value it does not know starts no holder
// and says so: a holder the operator may have meant to turn off could
// leave zombies, a missing one costs at most 5 s.
func holderWanted(lookup func(string) (string, bool)) (on bool, warning string) {
	switch v, _ := lookup(HolderEnv); v {
	case "", "on":
		return true, ""
	case "off":
		return false, ""
	default:
		return false, fmt.Sprintf("%s=%q is neither on nor off; no exit holder was started (Airflow may notice this task ended up to 5 s late)", HolderEnv, v)
	}
}
