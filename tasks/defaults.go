package tasks

import (
	"context"
	"errors"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// TEMPORARY until the modal and opensandbox drivers land.

// DefaultDrivers builds the driver for local, modal and opensandbox.
func DefaultDrivers(ctx context.Context, req DriverRequest) (sandbox.Driver, error) {
	return nil, errors.New("drivers not available yet")
}
