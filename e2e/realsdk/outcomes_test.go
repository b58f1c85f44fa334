package realsdk_test

import (
	"testing"
)

// The outcomes a task can choose, under Airflow 3.3's supervisor: skip
// (TaskState skipped, exit 0) and fail without retry although retries are
// left; and cleanup after SIGTERM, finished within the cancel grace or cut
// short by it, with the task log saying which.
func TestChosenOutcomesUnderAirflow33(t *testing.T) {
	root := t.TempDir()
	pack(t, root, "a.bundle", bundleA)
	c := func(name, task string) tcase {
		return tcase{Name: name, Roots: []string{root}, DagID: "outcomes", TaskID: task, MaxTries: 3, ShouldRetry: true}
	}
	cut, quick := c("cut_cleanup", "cut_cleanup"), c("quick_cleanup", "quick_cleanup")
	cut.SigtermOnEvent, quick.SigtermOnEvent = "waiting to be cancelled", "waiting to be cancelled"
	cut.ShouldRetry, quick.ShouldRetry = false, false
	res := runCases(t, []tcase{c("skip", "skip"), c("fail_no_retry", "fail_no_retry"), cut, quick})

	r := res["skip"]
	r.ranClean(t)
	r.onlyState(t, "skipped")
	if !r.logged("task skipped") {
		t.Errorf("the log does not say why it skipped: %v", r.Logs)
	}

	r = res["fail_no_retry"]
	r.ranClean(t)
	r.onlyState(t, "failed") // not up_for_retry, though retries are left
	if !r.logged("not retried, since retrying cannot fix") {
		t.Errorf("the log does not say the retry was refused: %v", r.Logs)
	}

	r = res["cut_cleanup"]
	if !r.SigtermSent {
		t.Fatal("no SIGTERM was sent")
	}
	r.ranClean(t)
	r.onlyState(t, "failed")
	if !r.logged("cleanup stopped") || !r.logged("its cleanup cut short by the cancel grace") {
		t.Errorf("the log must say the cleanup was cut short: %v", r.Logs)
	}

	r = res["quick_cleanup"]
	r.ranClean(t)
	r.onlyState(t, "failed")
	if !r.logged("cleanup done") || !r.logged("returned within the cancel grace, its cleanup finished") {
		t.Errorf("the log must say the cleanup finished: %v", r.Logs)
	}
}
