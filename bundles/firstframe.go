package bundles

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// How long the runtime waits for the first frame once it has connected.
//
// Airflow 3.3.2's supervisor accepts both connections, then marks the task
// running through the Execution API (PATCH task-instances/<id>/run) and
// sends StartupDetails only once that call returns; when it fails, the
// supervisor kills the task itself. That call is the supervisor's API
// client: up to [workers] execution_api_retries attempts (5), each bounded
// by execution_api_timeout (5 s; httpx applies it to the connect and to the
// read alike, so one attempt may take twice that), with random waits of at
// most 1, 2, 4, 8... s (capped by execution_api_retry_wait_max) between
// them. On a loaded 2-core host that one call took 25-50 s under a 60 s
// timeout. A peer that has said nothing after the slowest start Airflow's
// own settings allow, plus firstFrameSlack, is not going to: the runtime
// gives up on it, and exits non-zero.
//
// The supervisor's environment reaches the bundle, so its
// AIRFLOW__WORKERS__EXECUTION_API_* variables are read; settings made in
// airflow.cfg are not visible here, which is what the floor
// (minFirstFrameTimeout) covers: one slow attempt under a timeout raised
// there to a minute and a half. firstFrameTimeoutEnv overrides the lot.
const (
	// firstFrameTimeoutEnv names the operator's override of the bound (a Go
	// duration such as "10m").
	firstFrameTimeoutEnv = "AIRFLOW_GO_WORKER_FIRST_FRAME_TIMEOUT"
	// minFirstFrameTimeout is the least the runtime waits.
	minFirstFrameTimeout = 2 * time.Minute
	// firstFrameSlack is the supervisor's own work around the call on a
	// loaded host.
	firstFrameSlack = 30 * time.Second
)

// apiSetting is one of Airflow's [workers] settings the bound is computed
// from, with Airflow's default.
type apiSetting struct {
	env string
	def float64
}

var (
	apiRetries      = apiSetting{"AIRFLOW__WORKERS__EXECUTION_API_RETRIES", 5}
	apiTimeout      = apiSetting{"AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT", 5}
	apiRetryWaitMin = apiSetting{"AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MIN", 1}
	apiRetryWaitMax = apiSetting{"AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MAX", 90}
)

// firstFrameTimeout is the bound on the wait for the first frame, and a
// warning when a setting it read was not a number.
func firstFrameTimeout(lookup func(string) (string, bool)) (time.Duration, string) {
	if v, ok := lookup(firstFrameTimeoutEnv); ok && v != "" {
		d, err := time.ParseDuration(v)
		if err == nil && d > 0 {
			return d, ""
		}
		bound, _ := airflowStartBound(func(string) (string, bool) { return "", false })
		return bound, fmt.Sprintf("%s=%q is not a positive duration such as \"10m\"; using %s", firstFrameTimeoutEnv, v, bound)
	}
	return airflowStartBound(lookup)
}

// airflowStartBound is the slowest start Airflow's API client settings
// allow, plus firstFrameSlack, and at least minFirstFrameTimeout.
func airflowStartBound(lookup func(string) (string, bool)) (time.Duration, string) {
	var warning string
	read := func(s apiSetting) float64 {
		v, ok := lookup(s.env)
		if !ok || v == "" {
			return s.def
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			warning = fmt.Sprintf("%s=%q is not a number Airflow would take; bounding the wait for the first frame with its default %g", s.env, v, s.def)
			return s.def
		}
		return f
	}
	retries := max(1, math.Min(read(apiRetries), 100))
	timeout, waitMin, waitMax := read(apiTimeout), read(apiRetryWaitMin), read(apiRetryWaitMax)
	seconds := retries * 2 * timeout
	for n := 1.0; n < retries; n++ {
		seconds += math.Min(waitMax, math.Max(waitMin, math.Pow(2, n-1)))
	}
	bound := time.Duration(math.Min(seconds, 24*3600)*float64(time.Second)) + firstFrameSlack
	return max(bound, minFirstFrameTimeout), warning
}
