package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
	"golang.org/x/sys/unix"
)

// Worker-wide budgets. Each sandbox's limits hold on their own, but
// nothing kept their sum: three sandboxes of disk_mib 100 on a 250 MiB
// filesystem filled it (sparse images promise more than is there; one
// sandbox's ext4 went read-only and lost writes, and the other tasks could
// not write their results), and four fork-bombing sandboxes took a host
// from 163 to 3,908 processes. Now the live sandboxes under a root
// together stay within two budgets, and Create refuses a sandbox past
// either, having made nothing.
//
// Every task is a process of its own, so the ledger is on disk: the live
// sandboxes' own records (meta.json), plus a reservation in each
// half-made sandbox (reservationFile), read and written under a lock file
// in the root (budgetLock), which every create on the host holds while it
// counts, reserves and renames its sandbox into place. A sandbox stops
// counting when it is destroyed or expired (it can no longer write or
// run), and a reservation when the worker that made it is gone.
const (
	// DiskBudgetEnv is the operator's disk budget, in MiB: what the disk
	// images of the live sandboxes (disk_mib plus inode tables) may add
	// up to. Unset: the free space of the root's filesystem, which the
	// images not yet written may not outgrow.
	DiskBudgetEnv = "AIRFLOW_GO_WORKER_LOCAL_DISK_BUDGET_MIB"
	// ProcessBudgetEnv is the operator's process budget: what the process
	// limits of the live sandboxes may add up to. Unset: half of the
	// kernel's pid_max (or threads-max, if lower).
	ProcessBudgetEnv = "AIRFLOW_GO_WORKER_LOCAL_PROCESS_BUDGET"

	budgetLock      = ".budget.lock"     // in the root
	reservationFile = "reservation.json" // in a half-made sandbox
)

// budgets are a driver's two budgets.
type budgets struct {
	diskMiB   int64  // 0: the free space of the root's filesystem
	procs     int    // 0: none (no per-sandbox process limit to sum)
	procsFrom string // where procs came from, for refusals
}

// budgetsFromEnv reads the operator's settings, or works out the
// process budget's default from the kernel's limits.
func budgetsFromEnv() (budgets, error) {
	var b budgets
	if v := strings.TrimSpace(os.Getenv(DiskBudgetEnv)); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n > 1<<40 {
			return b, fmt.Errorf("%s=%q is not a disk budget; give the MiB all local sandboxes' disks may add up to, such as 102400, or leave it unset for the free space of the sandbox root's filesystem", DiskBudgetEnv, v)
		}
		b.diskMiB = n
	}
	if v := strings.TrimSpace(os.Getenv(ProcessBudgetEnv)); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return b, fmt.Errorf("%s=%q is not a process budget; give the processes all local sandboxes' process limits may add up to, such as 16384, or leave it unset for half of kernel.pid_max", ProcessBudgetEnv, v)
		}
		b.procs, b.procsFrom = n, ProcessBudgetEnv
		return b, nil
	}
	b.procs, b.procsFrom = defaultProcessBudget()
	return b, nil
}

// defaultProcessBudget is half of the pids the kernel hands out
// (kernel.pid_max, or kernel.threads-max where that is lower), so that
// sandboxes together leave the host the other half.
func defaultProcessBudget() (int, string) {
	pidMax, err1 := readSysctl("kernel/pid_max")
	threadsMax, err2 := readSysctl("kernel/threads-max")
	switch {
	case err1 != nil && err2 != nil:
		return 32768 / 2, "half of 32768, the kernel's default pid_max, as /proc/sys/kernel could not be read"
	case err2 == nil && (err1 != nil || threadsMax < pidMax):
		return threadsMax / 2, fmt.Sprintf("half of kernel.threads-max, %d", threadsMax)
	}
	return pidMax / 2, fmt.Sprintf("half of kernel.pid_max, %d", pidMax)
}

func readSysctl(name string) (int, error) {
	raw, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(raw)))
}

// reservation is what a half-made sandbox holds while its create runs.
type reservation struct {
	Owner  string `json:"owner"` // the creating worker (workerID)
	Limits limits `json:"limits"`
	owner  workerID
}

func readReservation(dir string) (*reservation, error) {
	raw, err := os.ReadFile(filepath.Join(dir, reservationFile))
	if err != nil {
		return nil, err
	}
	var r reservation
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, err
	}
	var ok bool
	if r.owner, ok = parseWorkerID(r.Owner); !ok {
		return nil, fmt.Errorf("%s names no worker", filepath.Join(dir, reservationFile))
	}
	return &r, nil
}

// usage is what the live sandboxes under a root (and the creates under
// way) hold against the budgets.
type usage struct {
	sandboxes int
	images    int64 // bytes their disk images may grow to
	unwritten int64 // of which the host has not given them yet
	procs     int
}

// add counts a sandbox of limits lim in directory dir.
func (u *usage) add(d *Driver, dir string, lim limits) {
	u.sandboxes++
	u.procs += d.procsOf(lim)
	if !lim.DiskImage {
		return // no image: nothing bounds it to count (the operator's DiskLimitEnv=off)
	}
	size := imageSize(lim)
	u.images += size
	var st unix.Stat_t
	if unix.Lstat(filepath.Join(dir, diskImage), &st) == nil {
		size -= st.Blocks * 512
	}
	u.unwritten += max(0, size)
}

// imageSize is the size of a sandbox's disk image: disk_mib and its
// inode tables.
func imageSize(lim limits) int64 {
	return int64(lim.DiskMiB)<<20 + int64(lim.DiskInodes)*inodeSize
}

// procsOf is the process limit of a sandbox of limits lim: its own, or
// this driver's for one made before sandboxes recorded it.
func (d *Driver) procsOf(lim limits) int {
	if lim.MaxProcesses > 0 {
		return lim.MaxProcesses
	}
	return d.maxProcs
}

// ledger counts what the live sandboxes and creates under the root hold;
// the caller holds the budget lock.
func (d *Driver) ledger() (usage, error) {
	var u usage
	entries, err := os.ReadDir(d.root)
	if err != nil {
		return u, fmt.Errorf("cannot list the sandboxes under %s to count them against the budgets: %v", d.root, err)
	}
	now := d.now()
	for _, e := range entries {
		dir := filepath.Join(d.root, e.Name())
		switch {
		case !e.IsDir():
		case validName(e.Name()):
			m, _, err := d.readMeta("count", e.Name())
			if err == nil && !m.expired(now) {
				u.add(d, dir, d.limitsOf(m))
			}
		case strings.HasPrefix(e.Name(), ".creating-"):
			if r, err := readReservation(dir); err == nil && !r.owner.gone() {
				u.add(d, dir, r.Limits)
			}
		}
	}
	return u, nil
}

// lockBudget takes the root's budget lock, shared by every worker process
// using the root; unlock releases it.
func (d *Driver) lockBudget() (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(d.root, budgetLock), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot open the budget lock of %s: %v", d.root, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("cannot lock the budget lock of %s: %v", d.root, err)
	}
	return func() { f.Close() }, nil
}

// reserve counts sandbox name of limits lim against the budgets and, if it
// fits, makes its half-made directory holding its reservation; nothing is
// made when it does not.
func (d *Driver) reserve(name string, lim limits) (staging string, err error) {
	unlock, err := d.lockBudget()
	if err != nil {
		return "", err
	}
	defer unlock()
	u, err := d.ledger()
	if err != nil {
		return "", err
	}
	if err := d.checkBudgets(u, lim); err != nil {
		return "", err
	}
	staging, err = os.MkdirTemp(d.root, ".creating-"+name+"-")
	if err != nil {
		return "", fmt.Errorf("cannot create a directory under %s: %v", d.root, err)
	}
	raw, _ := json.Marshal(reservation{Owner: thisWorker().String(), Limits: lim})
	if err := writeFileAtomic(filepath.Join(staging, reservationFile), raw, 0o600); err != nil {
		os.RemoveAll(staging)
		return "", fmt.Errorf("cannot record the sandbox's reservation: %v", err)
	}
	return staging, nil
}

// checkBudgets refuses a sandbox of limits lim that does not fit beside
// usage u. One that would not fit even alone is refused for good
// (ErrRefused); otherwise a retry may find room once others are gone.
func (d *Driver) checkBudgets(u usage, lim limits) error {
	var errs []error
	alone := false
	if lim.DiskImage {
		tooBig, err := d.checkDisk(u, imageSize(lim), lim.DiskMiB)
		errs, alone = append(errs, err), alone || tooBig
	}
	if p := lim.MaxProcesses; p > 0 && d.budget.procs > 0 && u.procs+p > d.budget.procs {
		errs = append(errs, fmt.Errorf("process budget: the %d live local sandboxes under %s may run %d processes together and this one %d more (its process limit), past this worker's process budget of %d (%s); destroy sandboxes no longer needed (the sweep removes those of finished runs), or have the operator raise %s or lower %s",
			u.sandboxes, d.root, u.procs, p, d.budget.procs, d.budget.procsFrom, ProcessBudgetEnv, MaxProcessesEnv))
		alone = alone || p > d.budget.procs
	}
	err := errors.Join(errs...)
	switch {
	case err == nil:
		return nil
	case alone:
		return driver.Refused("the local backend refuses this sandbox: %v", err)
	}
	return fmt.Errorf("the local backend cannot create this sandbox now (a later try may, once other sandboxes are gone): %w", err)
}

// checkDisk checks a disk image of need bytes (diskMiB asked for) against
// the disk budget; tooBig: it would not fit even alone.
func (d *Driver) checkDisk(u usage, need int64, diskMiB int) (tooBig bool, err error) {
	const mib = 1 << 20
	if b := d.budget.diskMiB; b > 0 {
		if u.images+need <= b*mib {
			return false, nil
		}
		return need > b*mib, fmt.Errorf("disk budget: the %d live local sandboxes under %s have disk images of %d MiB together, and this one needs %d MiB more (disk_mib %d plus its inode tables), past this worker's disk budget of %d MiB (%s); destroy sandboxes no longer needed (the sweep removes those of finished runs), ask for less with the local backend's disk_mib, or have the operator raise %s",
			u.sandboxes, d.root, ceilMiB(u.images), ceilMiB(need), diskMiB, b, DiskBudgetEnv, DiskBudgetEnv)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(d.root, &st); err != nil {
		return false, fmt.Errorf("disk budget: cannot read the free space of %s (%v); set %s to a budget in MiB instead", d.root, err, DiskBudgetEnv)
	}
	free := int64(st.Bavail) * st.Bsize
	if u.unwritten+need <= free {
		return false, nil
	}
	return false, fmt.Errorf("disk budget: this sandbox's disk image (%d MiB: disk_mib %d plus its inode tables) does not fit in the free space of %s's filesystem: %d MiB are free, and the %d live local sandboxes there may still write %d MiB of theirs (their images are sparse: filled together past the free space, a sandbox's filesystem fails and loses writes); destroy sandboxes no longer needed (the sweep removes those of finished runs), ask for less with the local backend's disk_mib, free space on the worker, or have the operator set %s (a budget in MiB that replaces this check)",
		ceilMiB(need), diskMiB, d.root, free/mib, u.sandboxes, ceilMiB(u.unwritten), DiskBudgetEnv)
}

func ceilMiB(n int64) int64 { return (n + 1<<20 - 1) >> 20 }
