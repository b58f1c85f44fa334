//go:build !linux

package supervisor

import (
	"net"
	"runtime"
	"time"
)

// heldByProcessTree cannot look a connection up without Linux's /proc, and
// a connection it cannot trace to the task may be any local process's: it
// refuses them all, saying why.
func heldByProcessTree(conn net.Conn, pid int, wait time.Duration) (bool, string) {
	return false, "the local supervisor checks who connects through /proc, which " + runtime.GOOS + " lacks; run tasks on Linux"
}
