package driver

import (
	"errors"
	"fmt"
)

// Error kinds; match with errors.Is. Every error a driver returns for one of
// these situations must wrap the matching kind.
var (
	ErrNotFound    = errors.New("no such file or directory")
	ErrIsDir       = errors.New("is a directory")
	ErrNotRegular  = errors.New("not a regular file")
	ErrTooLarge    = errors.New("file is larger than the byte limit")
	ErrGone        = errors.New("sandbox is gone")
	ErrRefused     = errors.New("spec refused")
	ErrUnsupported = errors.New("not supported by this backend")
)

// Error carries the operation, the sandbox and path involved, and whether
// retrying may help. Drivers build them with the helpers below.
type Error struct {
	Op        string // "exec", "read", "create", ...
	Sandbox   string
	Path      string
	Kind      error // one of the Err* kinds, or nil
	Retryable bool
	Err       error
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

// Retryable marks err as worth retrying. Terminal is the default.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return retryable{err}
}

// IsRetryable reports whether err was marked retryable. Errors are terminal
// unless a driver says otherwise: retrying a refused spec or a bad credential
// only burns time.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	var r retryable
	if errors.As(err, &r) {
		return true
	}
	var e *Error
	return errors.As(err, &e) && e.Retryable
}

// IsTerminal is !IsRetryable for a non-nil error.
func IsTerminal(err error) bool { return err != nil && !IsRetryable(err) }

// Refused builds a terminal ErrRefused error: the spec asks for something the
// backend cannot enforce, and nothing was provisioned.
func Refused(format string, a ...any) error {
	return &Error{Op: "create", Kind: ErrRefused, Err: fmt.Errorf(format, a...)}
}
