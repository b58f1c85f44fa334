package tasks

import (
	"context"
	"errors"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// TEMPORARY until sandbox/modal lands.
func openModal(ctx context.Context, req DriverRequest) (sandbox.Driver, error) {
	return nil, errors.New("the modal driver is not available yet")
}
