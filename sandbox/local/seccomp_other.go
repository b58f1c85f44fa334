//go:build !amd64 && !arm64

package local

// No filter on other architectures; namespaces and dropped capabilities
// still apply.
const (
	auditArch = 0
	x32Bit    = 0
)

var deniedSyscalls []int
