// Package exitorder makes a task process's exit visible to Airflow's
// supervisor no later than the end of its output.
//
// Airflow's supervisor (task SDK 1.3, WatchedSubprocess._monitor_subprocess)
// loops until the task process has exited and every socket it watches
// (stdout, stderr, comm, logs) has reached EOF. Each turn it waits in
// select for socket events, up to min_heartbeat_interval (5 s), then polls
// for the exit with waitpid(WNOHANG). The kernel closes an exiting
// process's descriptors before the process becomes a zombie, and waking
// the supervisor on that last EOF can preempt the exit right there: the
// supervisor then finds the process still alive and selects on no socket
// at all, which sleeps the whole 5 s before it polls again.
//
// Hold closes that window: it starts a holder, a child that keeps a copy
// of every descriptor open until this process's whole thread group has
// exited, which is exactly when waitpid can report it (a pidfd becomes
// readable then). The supervisor's last EOF then comes after the exit.
package exitorder
