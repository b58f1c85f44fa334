#include "textflag.h"

// func cloneHolder(flags uintptr, fds *pollFd) (pid, errno uintptr)
//
// clone(2) without a new stack: the child shares the caller's memory
// (CLONE_VM) and stack, so from the clone on it touches neither and works
// in registers only: ppoll(fds, 1, NULL, NULL) until its parent has
// exited, then exit_group(0). The parent returns the child's pid.
TEXT ·cloneHolder(SB),NOSPLIT|NOFRAME,$0-32
	MOVD	fds+8(FP), R9
	MOVD	flags+0(FP), R0
	MOVD	$0, R1 // newsp: none
	MOVD	$0, R2 // parent_tid
	MOVD	$0, R3 // tls
	MOVD	$0, R4 // child_tid
	MOVD	$220, R8 // SYS_clone
	SVC
	CBZ	R0, child
	CMN	$4095, R0
	BCC	ok
	NEG	R0, R0
	MOVD	ZR, pid+16(FP)
	MOVD	R0, errno+24(FP)
	RET
ok:
	MOVD	R0, pid+16(FP)
	MOVD	ZR, errno+24(FP)
	RET
child:
	MOVD	R9, R0 // fds
	MOVD	$1, R1 // nfds
	MOVD	$0, R2 // no timeout
	MOVD	$0, R3 // no signal mask
	MOVD	$73, R8 // SYS_ppoll
	SVC
	CMN	$4, R0 // EINTR: wait again
	BEQ	child
	MOVD	$0, R0
	MOVD	$94, R8 // SYS_exit_group
	SVC
	B	child
