package opensandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	osdk "github.com/alibaba/OpenSandbox/sdks/sandbox/go"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// APIError is a non-2xx answer from the lifecycle server, execd, or a proxy
// in between, as the SDK reported it (its *opensandbox.APIError is
// wrapped). Its message says which call failed and what to do.
type APIError struct {
	Op        string // "create sandbox", "run command", ...
	Status    int
	Code      string // e.g. DOCKER::SANDBOX_NOT_FOUND, FILE_NOT_FOUND; "" when the body had none
	Message   string
	RequestID string

	sdk *osdk.APIError // what the SDK returned
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("OpenSandbox could not %s (HTTP %d", e.Op, e.Status)
	if e.Code != "" {
		msg += " " + e.Code
	}
	msg += ")"
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.RequestID != "" {
		msg += " [request " + e.RequestID + "]"
	}
	if hint := e.hint(); hint != "" {
		msg += "; " + hint
	}
	return msg
}

func (e *APIError) hint() string {
	if h := e.serverHint(); h != "" {
		return h
	}
	switch {
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
		return "check the API key (the connection's password or OPEN_SANDBOX_API_KEY) and the endpoint headers"
	case e.Status == http.StatusNotFound:
		return "" // callers turn 404s into ErrGone or ErrNotFound with their own words
	case e.Status == http.StatusUnprocessableEntity || e.Status == http.StatusBadRequest:
		return "the server rejected the request; fix the sandbox spec or the call's arguments"
	case e.Status == http.StatusConflict:
		return "the sandbox is not in a state that allows this; check its state on the server"
	case e.Status == http.StatusBadGateway:
		return "a proxy could not reach the sandbox; it may still be starting, or it has stopped"
	case e.runtimeError() && !e.Retryable():
		return "execd reports a failure that retrying will not fix; check the path, its type and its permissions inside the sandbox"
	case e.Retryable():
		return "the server may be overloaded or restarting; retry later"
	}
	return ""
}

// serverHint explains the lifecycle server's answers that name their own
// cause: an image it has not got, its cap on a sandbox's lifetime, and its
// own configuration faults.
func (e *APIError) serverHint() string {
	switch {
	case e.imageMissing() && e.rateLimited():
		return "the registry refused the pull for now (rate limit); retry later, or put the image on the server's Docker host"
	case e.imageMissing():
		return "the image is not on the OpenSandbox server and the server could not pull it: load or build it on the server's Docker host (docker load, docker build), push it to a registry the server reaches, or fix the image name; retrying will not help"
	case e.lifetimeCapped():
		return "the sandbox's lifetime is longer than this server allows (max_sandbox_timeout_seconds in the server's [server] configuration): ask for a shorter lifetime, or have the server's operator raise that setting"
	case e.serverMisconfigured():
		return "the server cannot set up a sandbox as it is configured (its execd image, bootstrap script or network mode); its operator must fix the server's [runtime] or [docker] configuration; retrying will not help"
	}
	return ""
}

// Retryable: 5xx, 408 and 429 may pass; other 4xx will not. Some 5xx do
// not pass either: execd answers 500 RUNTIME_ERROR for deterministic
// failures too (a path that is a directory, no such session, mkdir over a
// file, a bad mode), terminal unless the message names a passing cause;
// and the lifecycle server answers 500 for an image it has not got and
// cannot pull (retrying would spend Airflow's retries on a create that
// cannot succeed) and for faults of its own configuration.
func (e *APIError) Retryable() bool {
	switch {
	case e.runtimeError():
		return transientCause(e.Message)
	case e.Status == http.StatusNotImplemented:
		return false
	case e.imageMissing():
		return e.rateLimited()
	case e.serverMisconfigured():
		return false
	}
	return e.Status >= 500 || e.Status == http.StatusRequestTimeout || e.Status == http.StatusTooManyRequests
}

// serverCode is the lifecycle server's code without its runtime's prefix
// (DOCKER::SANDBOX_IMAGE_PULL_FAILED -> SANDBOX_IMAGE_PULL_FAILED), so the
// codes of its Docker and Kubernetes runtimes read alike; "" for codes
// without one (execd's).
func (e *APIError) serverCode() string {
	_, code, ok := strings.Cut(e.Code, "::")
	if !ok {
		return ""
	}
	return code
}

// imageMissing: the server has not got the sandbox's image and could not
// pull it (opensandbox-server: 500 DOCKER::SANDBOX_IMAGE_PULL_FAILED).
func (e *APIError) imageMissing() bool { return e.serverCode() == "SANDBOX_IMAGE_PULL_FAILED" }

// rateLimited: a registry's "too many requests", which passes.
func (e *APIError) rateLimited() bool {
	m := strings.ToLower(e.Message)
	return strings.Contains(m, "toomanyrequests") || strings.Contains(m, "too many requests") || strings.Contains(m, "rate limit")
}

// lifetimeCapped: the server's max_sandbox_timeout_seconds refused the
// requested timeout (400 SANDBOX::INVALID_PARAMETER "Sandbox timeout 7200s
// exceeds configured maximum of 3600s.").
func (e *APIError) lifetimeCapped() bool {
	return e.Status == http.StatusBadRequest && strings.Contains(e.Message, "exceeds configured maximum")
}

// serverMisconfigured: codes of a server that cannot set up any sandbox as
// it is configured (its execd image lacks the binary or the bootstrap
// script, its network mode gives no endpoint), which only its operator can
// fix.
func (e *APIError) serverMisconfigured() bool {
	switch e.serverCode() {
	case "SANDBOX_EXECD_DISTRIBUTION_FAILED", "SANDBOX_BOOTSTRAP_INSTALL_FAILED", "NETWORK_MODE_ENDPOINT_UNAVAILABLE", "API_NOT_SUPPORTED":
		return true
	}
	return false
}

// Unwrap makes an answer retrying will not change an ErrRejected, so the
// task fails without Airflow's retries: a 4xx (bad key, invalid request,
// the lifetime cap), execd's deterministic 500 RUNTIME_ERROR, the server's
// missing image and its configuration faults.
func (e *APIError) Unwrap() []error {
	errs := []error{}
	if e.sdk != nil {
		errs = append(errs, e.sdk)
	}
	if !e.Retryable() {
		errs = append(errs, driver.ErrRejected)
	}
	return errs
}

// runtimeError: execd's own 500, as opposed to a proxy's or the lifecycle
// server's.
func (e *APIError) runtimeError() bool {
	return e.Status == http.StatusInternalServerError && e.Code == "RUNTIME_ERROR"
}

// transientCauses are the OS and network errors, in Go's words, after
// which the same call may succeed: resources that free up, interrupted or
// timed-out I/O.
var transientCauses = []string{
	"too many open files", "resource temporarily unavailable", "interrupted system call",
	"device or resource busy", "text file busy", "cannot allocate memory",
	"connection refused", "connection reset", "broken pipe", "i/o timeout", "timed out", "deadline exceeded",
}

func transientCause(msg string) bool {
	msg = strings.ToLower(msg)
	for _, c := range transientCauses {
		if strings.Contains(msg, c) {
			return true
		}
	}
	return false
}

// NotFound reports a 404.
func (e *APIError) NotFound() bool { return e.Status == http.StatusNotFound }

// MissingFile reports execd's answer for a path that does not exist: 404
// FILE_NOT_FOUND, or, on released v1.0.18, a 500 RUNTIME_ERROR whose text
// says so.
func (e *APIError) MissingFile() bool {
	return e.Status == http.StatusNotFound && e.Code == "FILE_NOT_FOUND" ||
		e.runtimeError() && strings.HasPrefix(e.Message, "error accessing file: file not found: ")
}

// DestExists reports execd's refusal to move onto a path that exists.
func (e *APIError) DestExists() bool {
	return e.runtimeError() && strings.Contains(e.Message, "destination path already exists")
}

// UnknownRoute reports execd's (Gin's) answer for a route or method it
// does not have: 404 with the text "404 page not found".
func (e *APIError) UnknownRoute() bool {
	return e.Status == http.StatusNotFound && e.Code == "" && e.Message == "404 page not found"
}

// SandboxNotFound reports the lifecycle server's "no such sandbox" answer
// (codes like DOCKER::SANDBOX_NOT_FOUND), which the server proxy also gives.
func (e *APIError) SandboxNotFound() bool {
	return e.Status == http.StatusNotFound && strings.HasSuffix(e.Code, "SANDBOX_NOT_FOUND")
}

// errorBodyWait bounds how long an error body may take to arrive: execd
// answers some errors with a Content-Length and no body (a malformed
// Range), and the SDK reads error bodies with no bound of its own on
// streams and transfers (see guard.go).
const errorBodyWait = 5 * time.Second

// callError turns what an SDK call returned into the driver's errors: the
// SDK's *APIError becomes an *APIError naming the call (op), a body that
// is no JSON the client expected says so, and anything else is a
// *TransportError (no HTTP answer, or one cut short). The SDK's error
// stays reachable with errors.As.
func callError(op string, err error) error {
	if err == nil {
		return nil
	}
	var se *osdk.APIError
	if errors.As(err, &se) {
		return fromSDK(op, se)
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syn) || errors.As(err, &typ) {
		return fmt.Errorf("OpenSandbox could not %s: the answer is not the expected JSON (%v); check that the domain points at an OpenSandbox server", op, err)
	}
	var inv *osdk.InvalidArgumentError
	if errors.As(err, &inv) {
		return fmt.Errorf("OpenSandbox could not %s: %w", op, err)
	}
	return &TransportError{Op: op, Err: err}
}

// fromSDK reads the SDK's error. The SDK keeps {code, message} bodies and
// gives any other body raw, with the status text as its code; the other
// shapes the servers use are read here: FastAPI's 422 {detail}, execd's
// 401 {error}, and plain text from proxies.
func fromSDK(op string, se *osdk.APIError) *APIError {
	e := &APIError{Op: op, Status: se.StatusCode, Code: se.Response.Code, Message: se.Response.Message, RequestID: se.RequestID, sdk: se}
	if e.Code != http.StatusText(se.StatusCode) {
		return e
	}
	e.Code = ""
	body := strings.TrimSpace(e.Message)
	var shaped struct {
		Message string          `json:"message"`
		Error   string          `json:"error"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal([]byte(body), &shaped) == nil {
		switch {
		case shaped.Message != "":
			e.Message = shaped.Message
			return e
		case shaped.Error != "":
			e.Message = shaped.Error
			return e
		case len(shaped.Detail) > 0:
			e.Message = detailText(shaped.Detail)
			return e
		}
	}
	e.Message = body
	if len(e.Message) > 500 {
		e.Message = e.Message[:500] + "..."
	}
	if e.Message == "" {
		e.Message = http.StatusText(se.StatusCode)
	}
	return e
}

// detailText flattens FastAPI's detail: a string, or a list of
// {loc: [...], msg} validation items.
func detailText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var items []struct {
		Loc []any  `json:"loc"`
		Msg string `json:"msg"`
	}
	if json.Unmarshal(raw, &items) != nil {
		return string(raw)
	}
	var parts []string
	for _, it := range items {
		loc := make([]string, 0, len(it.Loc))
		for _, l := range it.Loc {
			loc = append(loc, fmt.Sprint(l))
		}
		parts = append(parts, strings.Join(loc, ".")+": "+it.Msg)
	}
	return strings.Join(parts, "; ")
}

// classify marks err retryable: API errors by status, transport failures
// (refused, reset, timed out). Anything else is left unmarked, and is not
// retried within a call; an API error that is not retryable is final
// (APIError.Is). Context cancellation by the caller stays unmarked: the
// task is being stopped.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var api *APIError
	if errors.As(err, &api) {
		if api.Retryable() {
			return driver.Retryable(err)
		}
		return err
	}
	var te *TransportError
	if errors.As(err, &te) && !errors.Is(err, context.Canceled) {
		return driver.Retryable(err)
	}
	return err
}

// TransportError is a request that got no HTTP answer (refused, reset,
// timed out, cut mid-body): worth retrying.
type TransportError struct {
	Op  string
	Err error
}

func (e *TransportError) Error() string {
	return fmt.Sprintf("OpenSandbox could not %s: %v; check that the server is reachable (domain, protocol, network) and retry", e.Op, e.Err)
}

func (e *TransportError) Unwrap() error { return e.Err }
