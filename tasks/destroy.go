package tasks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// cleanupTimeout bounds cleanup that runs after the task's own context may
// already be cancelled; once it is, the runtime's cancel grace bounds it
// too (bundles/cleanup).
const cleanupTimeout = 2 * time.Minute

// DestroyInput names the sandbox to destroy.
type DestroyInput struct {
	// BackendOptions locate the sandbox (backend, conn_id and
	// backend_options); a Record given as Sandbox supplies the first two.
	BackendOptions
	Sandbox SandboxRef `json:"sandbox"`
	Owner   string     `json:"owner,omitempty"`
}

// Destroy removes a sandbox. It is idempotent: a sandbox that is already gone
// is success. It returns the id it destroyed.
func Destroy(ctx context.Context, d Deps, in DestroyInput) (string, error) {
	if err := d.check(); err != nil {
		return "", err
	}
	sb, backend, tags, err := openRef(ctx, d, in.BackendOptions, in.Sandbox, in.Owner)
	if err != nil {
		if errors.Is(err, sandbox.ErrGone) {
			d.logger().Info("sandbox already gone", "id", in.Sandbox.ID)
			return in.Sandbox.ID, nil
		}
		return "", err
	}
	defer backend.Close()
	if h := tags[sandbox.TagHolder]; h != "" {
		// Python never checks this either; say it, so that an agent failing
		// on a vanished sandbox can be traced to this task.
		d.logger().Warn("destroying a sandbox an agent task still holds; if that task is still running, it fails (run destroy after it, as a teardown)", "holder", h)
	}
	if err := sb.Destroy(ctx); err != nil {
		return "", fmt.Errorf("destroying sandbox %s: %w", sb.ID(), err)
	}
	d.logger().Info("sandbox destroyed", "id", sb.ID())
	return sb.ID(), nil
}

// CollectInput is an export followed by a destroy.
type CollectInput struct {
	// BackendOptions locate the sandbox (backend, conn_id and
	// backend_options); a Record given as Sandbox supplies the first two.
	BackendOptions
	Sandbox      SandboxRef        `json:"sandbox"`
	Exports      map[string]string `json:"exports,omitempty"`
	ExportConnID string            `json:"export_conn_id,omitempty"`
	MaxBytes     int64             `json:"max_bytes,omitempty"`
	Owner        string            `json:"owner,omitempty"`
	// SHA256 computes each exported file's SHA-256 (ExportInput.SHA256).
	SHA256 bool `json:"sha256,omitempty"`
}

// Collect exports the files, then destroys the sandbox whether or not the
// export succeeded (it is meant to be a teardown): a bad exports
// setting, a missing connection or a failed transfer all still destroy it.
// A failed export fails the task; a failed destroy is only logged, since the
// sandbox's lifetime reclaims it. With no exports it only destroys, and
// like destroy it succeeds when the sandbox is already gone.
func Collect(ctx context.Context, d Deps, in CollectInput) ([]string, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	sb, backend, tags, err := openRef(ctx, d, in.BackendOptions, in.Sandbox, in.Owner)
	if err != nil {
		if errors.Is(err, sandbox.ErrGone) {
			if len(in.Exports) == 0 {
				d.logger().Info("sandbox already gone; nothing to collect", "id", in.Sandbox.ID)
				return []string{}, nil
			}
			return nil, fmt.Errorf("%w; none of the files it was to export exist", err)
		}
		return nil, err
	}
	if h := tags[sandbox.TagHolder]; h != "" {
		// Collect runs once upstream is done (a teardown), so a holder left
		// behind is a task that ended without releasing: go ahead.
		d.logger().Info("the sandbox is still marked as held; its holder ended without releasing it, collecting anyway", "holder", h)
	}
	defer backend.Close()
	defer destroyQuietly(ctx, d, sb)
	if len(in.Exports) == 0 {
		return []string{}, nil
	}
	d, done := d.withStorage()
	defer done()
	plan, err := planExport(ctx, d, in.Exports, in.ExportConnID, in.MaxBytes)
	if err != nil {
		return nil, err
	}
	plan.sha256 = in.SHA256
	return exportFrom(ctx, d, sb, plan)
}
