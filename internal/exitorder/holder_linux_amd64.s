#include "textflag.h"

// func cloneHolder(flags uintptr, fds *pollFd) (pid, errno uintptr)
//
// clone(2) without a new stack: the child shares the caller's memory
// (CLONE_VM) and stack, so from the clone on it touches neither and works
// in registers only: ppoll(fds, 1, NULL, NULL) until its parent has
// exited, then exit_group(0). The parent returns the child's pid.
TEXT ·cloneHolder(SB),NOSPLIT,$0-32
	MOVQ	fds+8(FP), R12
	MOVQ	flags+0(FP), DI
	XORQ	SI, SI // newsp: none
	XORQ	DX, DX // parent_tid
	XORQ	R10, R10 // child_tid
	XORQ	R8, R8 // tls
	MOVQ	$56, AX // SYS_clone
	SYSCALL
	CMPQ	AX, $0
	JEQ	child
	CMPQ	AX, $0xfffffffffffff001
	JLS	ok
	NEGQ	AX
	MOVQ	$0, pid+16(FP)
	MOVQ	AX, errno+24(FP)
	RET
ok:
	MOVQ	AX, pid+16(FP)
	MOVQ	$0, errno+24(FP)
	RET
child:
	MOVQ	R12, DI // fds
	MOVQ	$1, SI // nfds
	XORQ	DX, DX // no timeout
	XORQ	R10, R10 // no signal mask
	MOVQ	$271, AX // SYS_ppoll
	SYSCALL
	CMPQ	AX, $-4 // EINTR: wait again
	JEQ	child
	XORQ	DI, DI
	MOVQ	$231, AX // SYS_exit_group
	SYSCALL
	JMP	child
