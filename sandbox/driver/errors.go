package driver

import (
	"errors"
	"fmt"

	"github.com/airflow-sandbox/airflow-go-worker/internal/final"
)

// Error kinds; match with errors.Is. Every error a driver returns for one of
// these situations must wrap the matching kind.
//
// Each kind but ErrOtherHost is final: a task failing with one is not
// retried by Airflow (bundles.ErrFailNoRetry), since the same call would
// get the same answer.
// An error with no kind and no Retryable mark is unknown: drivers' own
// retry loops leave it alone, and Airflow's retries get their chance.
var (
	ErrNotFound    = final.New("no such file or directory")
	ErrIsDir       = final.New("is a directory")
	ErrNotRegular  = final.New("not a regular file")
	ErrTooLarge    = final.New("file is larger than the byte limit")
	ErrGone        = final.New("sandbox is gone")
	ErrRefused     = final.New("spec refused")
	ErrUnsupported = final.New("not supported by this backend")
	// ErrRejected is the backend's answer that the request cannot succeed
	// as made: credentials it refuses, an argument it finds invalid, a
	// connection it cannot use, a deterministic failure inside the sandbox
	// (execd's 500 RUNTIME_ERROR for a path that is a directory).
	ErrRejected = final.New("rejected by the backend")
	// ErrOtherHost: the sandbox lives on another host (a local sandbox,
	// asked for on another worker); the error names both and the fix. Not
	// final: Airflow's retry may run the task on the sandbox's host.
	ErrOtherHost = errors.New("sandbox lives on another host")
)

// Error carries the operation, the sandbox and path involved, and its
// kind. Drivers build them with the helpers below; Retryable marks one
// whose cause may pass.
type Error struct {
	Op      string // "exec", "read", "create", ...
	Sandbox string
	Path    string
	Kind    error // one of the Err* kinds, or nil
	Err     error
}

func (e *Error) Error() string {
	msg := e.Op
	if e.Sandbox != "" {
		msg += " in sandbox " + e.Sandbox
	}
	if e.Path != "" {
		msg += fmt.Sprintf(" %q", e.Path)
	}
	switch {
	case e.Err != nil:
		return msg + ": " + e.Err.Error()
	case e.Kind != nil:
		return msg + ": " + e.Kind.Error()
	}
	return msg + ": failed"
}

func (e *Error) Unwrap() []error {
	var out []error
	if e.Kind != nil {
		out = append(out, e.Kind)
	}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// TooLargeError reports a file over a byte budget; it matches ErrTooLarge.
type TooLargeError struct {
	Path     string
	Size     int64 // -1 when unknown (the stream ran past the limit)
	MaxBytes int64
}

func (e *TooLargeError) Error() string {
	if e.Size < 0 {
		return fmt.Sprintf("%q is larger than the %d-byte limit; read a slice of it (head, tail, split) or raise the limit", e.Path, e.MaxBytes)
	}
	return fmt.Sprintf("%q is %d bytes, over the %d-byte limit; read a slice of it (head, tail, split) or raise the limit", e.Path, e.Size, e.MaxBytes)
}

func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// retryable marks an error whose cause may pass (a dropped connection, a 503).
type retryable struct{ err error }

func (r retryable) Error() string { return r.err.Error() }
func (r retryable) Unwrap() error { return r.err }

// Retryable marks err as worth retrying: the one mark of a transient
// error. Drivers retry within a call only what carries it (an unmarked
// error may have taken effect, or may not pass); Airflow retries a task
// whose error is not final, marked or not.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return retryable{err}
}

// IsRetryable reports whether err was marked Retryable.
func IsRetryable(err error) bool {
	var r retryable
	return err != nil && errors.As(err, &r)
}

// IsFinal reports whether err has a kind (or another final mark): an
// error retrying cannot fix, which fails a task without Airflow's retries.
func IsFinal(err error) bool { return final.Is(err) }

// Rejected marks err as ErrRejected, keeping its message: the backend's
// answer that retrying the same request will not change.
func Rejected(err error) error { return final.Wrap(ErrRejected, err) }

// Refused builds an ErrRefused error: the spec asks for something the
// backend cannot enforce, and nothing was provisioned.
func Refused(format string, a ...any) error {
	return &Error{Op: "create", Kind: ErrRefused, Err: fmt.Errorf(format, a...)}
}
