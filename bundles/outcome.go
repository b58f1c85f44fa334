package bundles

import (
	"fmt"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
)

// ErrFailNoRetry marks a task error as final: the task fails even when
// Airflow has retries left (Airflow records failed, not up_for_retry).
// Wrap it (fmt.Errorf("...: %w", bundles.ErrFailNoRetry)) or use
// FailNoRetry. The errors this module knows retrying cannot fix carry it
// already: a missing connection, variable or upstream XCom
// (ErrConnectionNotFound, ErrVariableNotFound, ErrXComNotFound), an input
// that cannot be bound, and, in the standard tasks, a refused spec, bad
// input or a backend's deterministic answer. Any other error is retried.
var ErrFailNoRetry = final.Err

// FailNoRetry returns err marked with ErrFailNoRetry; its message is err's.
func FailNoRetry(err error) error { return final.Mark(err) }

// skipError ends a task skipped: Airflow records skipped, and the reason is
// in the task log. Return Skip(reason) (or wrap a *skipError).
type skipError struct{ Reason string }

func (e *skipError) Error() string { return "skipped: " + e.Reason }

// Skip returns an error that ends the task skipped, saying why.
func Skip(format string, args ...any) error {
	return &skipError{Reason: fmt.Sprintf(format, args...)}
}
