package local

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/registry"
)

// The local backend takes no connection. Its sandboxes live under
// DefaultRoot(), so the separate processes of provision, run and collect
// find the same sandboxes.
func init() {
	registry.Register(registry.Registration{Name: Backend, Configure: configure})
}

// BundleOptions are the local backend's settings in a bundle config
// (backends: {local: {...}} or a task's backend_options.local). Where
// sandboxes live and which bubblewrap and prlimit run belong to whoever
// runs the worker, not to a Dag: they are not options.
type BundleOptions struct {
	// IgnoreImage runs specs that name a registry image on the host's
	// userland instead of refusing them (Options.IgnoreImage).
	IgnoreImage bool `json:"ignore_image,omitempty"`
	// IgnoreCPU accepts cpu without limiting it (Options.IgnoreCPU).
	IgnoreCPU bool `json:"ignore_cpu,omitempty"`
	// DefaultMemoryMiB is the memory limit of a sandbox whose spec sets no
	// memory_mib (Options.DefaultMemoryMiB; DefaultMemoryMiB when unset).
	DefaultMemoryMiB int `json:"default_memory_mib,omitempty"`
	// DiskMiB bounds what a sandbox's workdir and /tmp hold
	// (Options.DiskMiB; DefaultDiskMiB when unset).
	DiskMiB int `json:"disk_mib,omitempty"`
	// DiskInodes caps the files and directories a sandbox's filesystem
	// holds (Options.DiskInodes; one per 16 KiB of disk_mib when unset).
	DiskInodes int `json:"disk_inodes,omitempty"`
}

func configure(raw json.RawMessage) (registry.Config, error) {
	var o BundleOptions
	if err := registry.DecodeOptions(raw, &o); err != nil {
		return nil, err
	}
	const most = 1 << 30 // 1 PiB
	if o.DefaultMemoryMiB < 0 || o.DiskMiB < 0 || o.DefaultMemoryMiB > most || o.DiskMiB > most {
		return nil, fmt.Errorf("default_memory_mib and disk_mib are sizes in MiB: give a positive number up to %d (or leave them out for %d and %d MiB), not %d and %d", most, DefaultMemoryMiB, DefaultDiskMiB, o.DefaultMemoryMiB, o.DiskMiB)
	}
	if o.DiskInodes < 0 || o.DiskInodes > 1<<32-1 {
		return nil, fmt.Errorf("disk_inodes is how many files and directories a sandbox may hold: give a positive number up to %d (or leave it out for one per 16 KiB of disk_mib), not %d", 1<<32-1, o.DiskInodes)
	}
	return o, nil
}

// Capabilities of the local backend with these options.
func (o BundleOptions) Capabilities() driver.Capabilities { return capabilities(o.IgnoreCPU) }

// Open builds the driver; conn is always nil. Image roots come from the
// worker's environment (ImageRootsEnv).
func (o BundleOptions) Open(_ context.Context, _ *connections.Connection, log hclog.Logger) (driver.Driver, error) {
	maxProcs, err := maxProcessesFromEnv()
	if err != nil {
		return nil, err
	}
	return New(Options{IgnoreImage: o.IgnoreImage, IgnoreCPU: o.IgnoreCPU, Logger: log,
		ImageRoots: splitRoots(os.Getenv(ImageRootsEnv)), MaxProcesses: maxProcs, Host: os.Getenv(HostnameEnv),
		DefaultMemoryMiB: o.DefaultMemoryMiB, DiskMiB: o.DiskMiB, DiskInodes: o.DiskInodes})
}

// HostnameEnv names this worker host in local sandbox ids (default: the
// host name): for workers whose host name is not theirs alone, such as
// containers given one name, or several workers on one machine with
// separate state directories.
const HostnameEnv = "AIRFLOW_GO_WORKER_HOSTNAME"

// MaxProcessesEnv is the operator's cap on the processes and threads of
// each sandbox command: a number, or -1 for none (on a host that cannot
// enforce one: a root worker without a writable pids cgroup). Unset:
// DefaultMaxProcesses.
const MaxProcessesEnv = "AIRFLOW_GO_WORKER_LOCAL_MAX_PROCESSES"

func maxProcessesFromEnv() (int, error) {
	v := strings.TrimSpace(os.Getenv(MaxProcessesEnv))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n == 0 || n < -1 {
		return 0, fmt.Errorf("%s=%q is not a process limit; give a positive number such as 1024, or -1 for no limit", MaxProcessesEnv, v)
	}
	return n, nil
}

// ImageRootsEnv names the worker setting that allows image directories:
// colon-separated absolute directories under which an image directory must
// lie. Unset or empty: none is allowed. It belongs to the operator, like the
// worker's environment, never to a Dag run.
const ImageRootsEnv = "AIRFLOW_GO_WORKER_IMAGE_ROOTS"

// splitRoots splits a colon-separated list of directories, dropping empty
// entries; New checks that each is an existing absolute directory.
func splitRoots(v string) []string {
	var roots []string
	for _, r := range strings.Split(v, ":") {
		if r = strings.TrimSpace(r); r != "" {
			roots = append(roots, r)
		}
	}
	return roots
}
