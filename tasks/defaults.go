package tasks

import (
	"context"
	"errors"
	"io"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// TEMPORARY until sandbox/local, modal, opensandbox and storage land.

// DefaultDrivers builds the driver for local, modal and opensandbox.
func DefaultDrivers(ctx context.Context, req DriverRequest) (sandbox.Driver, error) {
	return nil, errors.New("drivers not available yet")
}

// DefaultStorage is package storage.
var DefaultStorage Storage = pendingStorage{}

type pendingStorage struct{}

func (pendingStorage) Open(ctx context.Context, url string, aws *connections.AWSConfig, log hclog.Logger) (io.ReadCloser, error) {
	return nil, errors.New("storage not available yet")
}
func (pendingStorage) NewExport(aws *connections.AWSConfig, log hclog.Logger) Exporter { return nil }
