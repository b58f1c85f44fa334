package local

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// The seccomp filter fails, with EPERM, the system calls a sandboxed
// command has no use for and that widen the kernel's attack surface: kernel
// keyrings, BPF, perf events, userfaultfd, io_uring, file handles, module
// and kexec loading, swap, accounting, reboot. Namespaces and dropped
// capabilities already stop most of these; the filter is a second wall.
// deniedSyscalls and auditArch live in the per-architecture files; on other
// architectures there is no filter.

// seccompProgram compiles the filter to the classic BPF bytes bwrap's
// --seccomp reads; nil when the architecture has none.
func seccompProgram() []byte {
	if auditArch == 0 {
		return nil
	}
	const (
		ld  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		ret = unix.BPF_RET | unix.BPF_K
	)
	var prog []unix.SockFilter
	var toDeny []int // indexes of jumps whose "true" branch goes to deny
	// Offsets into struct seccomp_data: nr at 0, arch at 4.
	prog = append(prog, unix.SockFilter{Code: ld, K: 4})
	// A foreign architecture (32-bit int 0x80 on x86_64) has other syscall
	// numbers: deny it all. jt skips to the next check, jf goes to deny.
	archCheck := len(prog)
	prog = append(prog, unix.SockFilter{Code: jeq, K: auditArch})
	prog = append(prog, unix.SockFilter{Code: ld, K: 0})
	if x32Bit != 0 {
		toDeny = append(toDeny, len(prog))
		prog = append(prog, unix.SockFilter{Code: jge, K: x32Bit})
	}
	for _, nr := range deniedSyscalls {
		toDeny = append(toDeny, len(prog))
		prog = append(prog, unix.SockFilter{Code: jeq, K: uint32(nr)})
	}
	prog = append(prog, unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ALLOW})
	deny := len(prog)
	prog = append(prog, unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)})

	prog[archCheck].Jf = uint8(deny - archCheck - 1)
	for _, i := range toDeny {
		prog[i].Jt = uint8(deny - i - 1)
	}
	out := make([]byte, 0, 8*len(prog))
	for _, f := range prog {
		out = binary.NativeEndian.AppendUint16(out, f.Code)
		out = append(out, f.Jt, f.Jf)
		out = binary.NativeEndian.AppendUint32(out, f.K)
	}
	return out
}
