package tasks

import (
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
	"github.com/airflow-sandbox/airflow-go-worker/testing/conformance"
)

// The driver the task tests run against keeps the contract every real
// driver keeps, so what those tests prove holds for the real ones.
func TestTestDriverConformance(t *testing.T) {
	var drv *dirDriver
	conformance.Run(t, func(t *testing.T) driver.Driver {
		drv = newDirDriver(t)
		return drv
	}, conformance.Options{
		// An open network cannot reach the worker's 127.0.0.1 (issue 19):
		// TestOpenNetworkIsPrivate in sandbox/local is the positive control,
		// against a server outside the worker.
		OpenNetworkReachesTarget: false,
		HostWorkdir: func(id string) string {
			work, _, err := drv.HostDirs(id)
			if err != nil {
				panic(err)
			}
			return work
		},
		BigFileSize: 32 << 20,
	})
}
