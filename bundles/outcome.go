package bundles

import (
	"errors"
	"fmt"
)

// ErrFailNoRetry marks a task error as final: the task fails even when
// Airflow has retries left (Airflow records failed, not up_for_retry).
// Wrap it (fmt.Errorf("...: %w", bundles.ErrFailNoRetry)) or use
// FailNoRetry.
var ErrFailNoRetry = errors.New("failed without retry")

// FailNoRetry returns err marked with ErrFailNoRetry; its message is err's.
func FailNoRetry(err error) error {
	if err == nil {
		return nil
	}
	return &noRetryError{err}
}

type noRetryError struct{ err error }

func (e *noRetryError) Error() string        { return e.err.Error() }
func (e *noRetryError) Unwrap() []error      { return []error{e.err, ErrFailNoRetry} }
func (e *noRetryError) Is(target error) bool { return target == ErrFailNoRetry }

// SkipError ends a task skipped: Airflow records skipped, and the reason is
// in the task log. Return Skip(reason) (or wrap a *SkipError).
type SkipError struct{ Reason string }

func (e *SkipError) Error() string { return "skipped: " + e.Reason }

// Skip returns an error that ends the task skipped, saying why.
func Skip(format string, args ...any) error {
	return &SkipError{Reason: fmt.Sprintf(format, args...)}
}
