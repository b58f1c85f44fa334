// Package final marks the errors that retrying cannot fix: a refused spec,
// a missing connection, bad input, a backend's deterministic answer. The
// task runtime (bundles) ends a task whose error is final as failed, even
// with retries left, and asks Airflow to retry any other error.
//
// There is one mark, Err, which bundles exports as ErrFailNoRetry. Each
// package declares its final error kinds with New (storage.ErrNotFound,
// connections.ErrNotFound, sandbox's ErrRefused, ...) or marks one error
// with Mark or Errorf, where the error is made: the code that knows an
// error cannot pass is the code that says so, and nothing above it has to
// list the classes again. An error is final when any error in its chain
// is, so wrapping one (%w) keeps it final; an error without the mark is
// left to Airflow's retries, since a cause nobody classified may pass.
package final

import (
	"errors"
	"fmt"
)

// Err is the mark: errors.Is(err, Err) reports whether err is final.
var Err = errors.New("failed without retry")

// Is reports whether err, or an error it wraps, is final.
func Is(err error) bool { return errors.Is(err, Err) }

// New returns a sentinel error, compared with errors.Is like any other,
// that is final wherever it is wrapped.
func New(msg string) error { return &kind{msg} }

type kind struct{ msg string }

func (k *kind) Error() string        { return k.msg }
func (k *kind) Is(target error) bool { return target == Err }

// Mark returns err marked final, with err's message; nil stays nil.
func Mark(err error) error { return Wrap(Err, err) }

// Errorf is Mark(fmt.Errorf(format, a...)).
func Errorf(format string, a ...any) error { return Mark(fmt.Errorf(format, a...)) }

// Wrap returns err, with err's message, as an error of kind too: errors.Is
// matches both. A driver uses it to give its own words a kind declared
// with New (sandbox's ErrRejected, storage's ErrNoBucket).
func Wrap(kind, err error) error {
	if err == nil {
		return nil
	}
	return &kinded{err, kind}
}

type kinded struct{ err, kind error }

func (k *kinded) Error() string   { return k.err.Error() }
func (k *kinded) Unwrap() []error { return []error{k.err, k.kind} }
