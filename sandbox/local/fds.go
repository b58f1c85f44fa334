package local

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// keepFdsFromChildren marks every descriptor of this process above 2
// close-on-exec, so that bwrap (and through it the sandbox) and
// slirp4netns get only the ones passed to them. Go opens its own
// descriptors close-on-exec, but whatever the worker inherited without the
// flag (from Airflow's supervisor, a Celery worker, a shell) was passed on
// to every child, into the sandbox. exec.Cmd's ExtraFiles are unaffected:
// they are duplicated into the child, where the flag is cleared.
func keepFdsFromChildren() {
	if unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	// Kernels before 5.11 lack the flag: one descriptor at a time.
	entries, _ := os.ReadDir("/proc/self/fd")
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}
