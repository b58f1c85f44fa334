package opensandbox

import (
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/testing/drivertypes"
)

// The driver implements driver.Driver in driver's own types: the names
// sandbox/types.go declares are the portable API's aliases for its users,
// not for backends (issue 40).
func TestDriverSpeaksDriverTypes(t *testing.T) {
	drivertypes.NoAliases(t, ".")
}
