package sandbox

import (
	"time"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

// The driver package defines what backends exchange with this package;
// these names let users of the portable API say sandbox.Spec, sandbox.ErrGone
// and so on without importing it.
type (
	Capabilities  = driver.Capabilities
	Capability    = driver.Capability
	Spec          = driver.Spec
	NetworkPolicy = driver.NetworkPolicy
	Info          = driver.Info
	ExecRequest   = driver.ExecRequest
	ExecResult    = driver.ExecResult
	FileInfo      = driver.FileInfo
	Error         = driver.Error
	TooLargeError = driver.TooLargeError
)

// Defaults applied by Spec.WithDefaults, the longest lifetime, and the
// timeout of a command whose ExecOptions.Timeout is zero.
const (
	DefaultLifetime    = driver.DefaultLifetime
	DefaultWorkdir     = driver.DefaultWorkdir
	MaxLifetime        = driver.MaxLifetime
	DefaultExecTimeout = driver.DefaultExecTimeout
)

// Tag names, exactly as the Python provider reads them (docs/handoff.md,
// "The ownership tags"); see driver.TagSandbox and the rest.
const (
	ReservedTagPrefix = driver.ReservedTagPrefix
	TagSandbox        = driver.TagSandbox
	TagOwner          = driver.TagOwner
	TagHolder         = driver.TagHolder
	TagExpiresAt      = driver.TagExpiresAt
	TagNetwork        = driver.TagNetwork
	TagWorkdir        = driver.TagWorkdir
	TagHost           = driver.TagHost
	TagCreatedBy      = driver.TagCreatedBy
	CreatedByValue    = driver.CreatedByValue
)

// Error kinds; match with errors.Is.
var (
	ErrNotFound    = driver.ErrNotFound
	ErrIsDir       = driver.ErrIsDir
	ErrNotRegular  = driver.ErrNotRegular
	ErrTooLarge    = driver.ErrTooLarge
	ErrGone        = driver.ErrGone
	ErrRefused     = driver.ErrRefused
	ErrUnsupported = driver.ErrUnsupported
	ErrRejected    = driver.ErrRejected
	ErrOtherHost   = driver.ErrOtherHost
)

// ExpiresAt reads the airflow_expires_at tag; zero when absent or malformed.
func ExpiresAt(tags map[string]string) time.Time { return driver.ExpiresAt(tags) }

// Retryable marks err as worth retrying within a call (see driver.Retryable).
func Retryable(err error) error { return driver.Retryable(err) }

// IsRetryable reports whether err was marked retryable.
func IsRetryable(err error) bool { return driver.IsRetryable(err) }

// IsFinal reports whether retrying err cannot help (see driver.IsFinal).
func IsFinal(err error) bool { return driver.IsFinal(err) }

// Rejected marks err as ErrRejected (see driver.Rejected).
func Rejected(err error) error { return driver.Rejected(err) }

// Refused builds an ErrRefused error: the spec asks for something
// the backend cannot enforce, and nothing was provisioned.
func Refused(format string, a ...any) error { return driver.Refused(format, a...) }
