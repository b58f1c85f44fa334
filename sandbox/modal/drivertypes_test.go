package modal

import (
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/testing/drivertypes"
)

// The driver implements driver.Driver in driver's own names, below the
// portable layer: the names sandbox/types.go declares are the portable
// API's aliases for its users, not for backends, and nothing else of
// package sandbox is a backend's to use (issue 40).
func TestDriverSpeaksDriverTypes(t *testing.T) {
	drivertypes.NoPortableImport(t, ".")
}
