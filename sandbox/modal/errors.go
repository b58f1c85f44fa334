package modal

import (
	"context"
	"errors"
	"fmt"
	"strings"

	modal "github.com/modal-labs/modal-client/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// credentialHint ends every credential error: it is what the user can fix.
const credentialHint = "check the modal connection's token id (login) and token secret (password), or MODAL_TOKEN_ID/MODAL_TOKEN_SECRET, and that the token belongs to the workspace that owns the sandbox"

// grpcCode finds a gRPC status code in err's chain; the SDK wraps some
// (auth failures) with fmt.Errorf and passes others through raw.
func grpcCode(err error) (codes.Code, bool) {
	for e := err; e != nil; {
		if st, ok := status.FromError(e); ok {
			return st.Code(), true
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			break
		}
		e = u.Unwrap()
	}
	return codes.OK, false
}

// mapErr classifies an SDK error for op on sandbox id ("" when none):
// gone, rejected (final), retryable, or unknown, with a message that says
// what to do.
func mapErr(op, id string, err error) error {
	if err == nil {
		return nil
	}
	e := &driver.Error{Op: op, Sandbox: id, Err: err}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return e
	}
	var (
		notFound  modal.NotFoundError
		conflict  modal.ConflictError
		exhausted modal.ResourceExhaustedError
		closed    modal.ClientClosedError
	)
	switch {
	case errors.As(err, &notFound), errors.As(err, &conflict):
		// "Sandbox is unavailable" / "has already finished".
		if id != "" {
			e.Kind = driver.ErrGone
		}
		return e
	case errors.As(err, &exhausted):
		return driver.Retryable(e)
	case errors.As(err, &closed):
		e.Kind = driver.ErrGone
		return e
	case strings.Contains(err.Error(), "missing credentials"):
		e.Kind = driver.ErrRejected
		e.Err = fmt.Errorf("no Modal credentials found: %v; set the modal connection's login/password, or MODAL_TOKEN_ID/MODAL_TOKEN_SECRET, or run `modal token new`", err)
		return e
	}
	code, ok := grpcCode(err)
	if !ok {
		return e
	}
	switch code {
	case codes.Unauthenticated, codes.PermissionDenied:
		e.Kind = driver.ErrRejected
		e.Err = fmt.Errorf("Modal refused the credentials (%v); %s", err, credentialHint)
	case codes.InvalidArgument:
		e.Kind = driver.ErrRejected
		e.Err = fmt.Errorf("Modal rejected the request as invalid: %v", err)
	case codes.NotFound, codes.FailedPrecondition:
		if id != "" {
			e.Kind = driver.ErrGone
		}
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted:
		return driver.Retryable(e)
	}
	return e
}

// isGone reports whether err says the sandbox no longer exists.
func isGone(err error) bool { return errors.Is(err, driver.ErrGone) }
