//go:build !(linux && (amd64 || arm64))

package exitorder

import (
	"errors"
	"fmt"
)

// Hold is not implemented here; the process exits as it always did.
func Hold() (int, error) {
	return 0, fmt.Errorf("no exit holder on this platform: %w", errors.ErrUnsupported)
}
