package tasks

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
)

// Storage is the object storage the tasks read inputs from and export to.
// DefaultStorage is backed by package storage (s3://, file://, ...).
type Storage interface {
	// Open streams the object at url.
	Open(ctx context.Context, url string, aws *connections.AWSConfig, log hclog.Logger) (io.ReadCloser, error)
	// NewExport starts an all-or-nothing export.
	NewExport(aws *connections.AWSConfig, log hclog.Logger) Exporter
}

// Exporter stages files next to their destinations and moves them into place
// only on Commit, so a failed export leaves nothing half-written.
type Exporter interface {
	// Stage streams r to a staging object beside destURL; it returns the
	// bytes written.
	Stage(ctx context.Context, destURL string, r io.Reader) (int64, error)
	// Commit moves every staged object into place and returns their URLs.
	Commit(ctx context.Context) ([]string, error)
	// Abort removes what was staged.
	Abort(ctx context.Context) error
}

// resolveAWS reads the aws connection for storage. An empty id means the
// default AWS credential chain (and no settings for file:// URLs).
func resolveAWS(ctx context.Context, d Deps, connID, field string) (*connections.AWSConfig, error) {
	if connID == "" {
		return nil, nil
	}
	conn, err := d.Airflow.GetConnection(ctx, connID)
	if errors.Is(err, connections.ErrNotFound) {
		return nil, fmt.Errorf("%s: Airflow connection %q does not exist; create it (type aws) or remove %s to use the worker's default AWS credentials", field, connID, field)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: reading Airflow connection %q: %w", field, connID, err)
	}
	cfg, err := connections.AWSFromConnection(conn)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return &cfg, nil
}
