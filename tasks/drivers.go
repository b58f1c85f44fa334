package tasks

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/local"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/modal"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/opensandbox"
)

// ImageRootsEnv names the worker setting that allows local-backend image
// directories: colon-separated absolute directories under which an image
// directory must lie. Unset or empty: none is allowed. It belongs to the
// operator, like the worker's environment, never to a Dag run.
const ImageRootsEnv = "AIRFLOW_GO_WORKER_IMAGE_ROOTS"

// LocalMaxProcessesEnv is the operator's cap on the processes and threads
// of each local sandbox command: a number, or -1 for none (on a host that
// cannot enforce one: a root worker without a writable pids cgroup). Unset:
// local.DefaultMaxProcesses.
const LocalMaxProcessesEnv = "AIRFLOW_GO_WORKER_LOCAL_MAX_PROCESSES"

func localMaxProcesses() (int, error) {
	v := strings.TrimSpace(os.Getenv(LocalMaxProcessesEnv))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n == 0 || n < -1 {
		return 0, fmt.Errorf("%s=%q is not a process limit; give a positive number such as 1024, or -1 for no limit", LocalMaxProcessesEnv, v)
	}
	return n, nil
}

// DefaultDrivers builds the driver for a resolved request: the one place
// where a backend name and a connection become a driver.
//
// The local backend keeps its sandboxes under local.DefaultRoot()
// ($XDG_STATE_HOME/airflow-go-worker/sandboxes), so the separate processes
// of provision, run and collect find the same sandboxes.
func DefaultDrivers(ctx context.Context, req DriverRequest) (sandbox.Driver, error) {
	switch req.Backend {
	case BackendLocal:
		maxProcs, err := localMaxProcesses()
		if err != nil {
			return nil, err
		}
		return local.New(local.Options{
			IgnoreImage: req.Options.IgnoreImage, Logger: req.Logger,
			ImageRoots: splitRoots(os.Getenv(ImageRootsEnv)), MaxProcesses: maxProcs,
		})
	case BackendOpenSandbox:
		if req.Conn == nil {
			return nil, fmt.Errorf("the opensandbox backend needs a connection")
		}
		cfg, err := connections.OpenSandboxFromConnection(*req.Conn)
		if err != nil {
			return nil, err
		}
		return opensandbox.New(opensandbox.Options{Config: cfg, Logger: req.Logger})
	case BackendModal:
		// A nil connection (modal_default missing) means the SDK's own
		// credentials: MODAL_TOKEN_ID/MODAL_TOKEN_SECRET or ~/.modal.toml.
		creds, err := connections.ModalFromConnection(req.Conn)
		if err != nil {
			return nil, err
		}
		o := req.Options
		return modal.New(ctx, modal.Options{
			Credentials: creds, AppName: o.AppName, EgressEnforcement: o.EgressEnforcement,
			GPU: o.GPU, Regions: o.Regions, Cloud: o.Cloud, Logger: req.Logger,
		})
	}
	return nil, fmt.Errorf("backend %q is not one of local, modal, opensandbox", req.Backend)
}

// splitRoots splits a colon-separated list of directories, dropping empty
// entries; the driver checks that each is an existing absolute directory.
func splitRoots(v string) []string {
	var roots []string
	for _, r := range strings.Split(v, ":") {
		if r = strings.TrimSpace(r); r != "" {
			roots = append(roots, r)
		}
	}
	return roots
}
