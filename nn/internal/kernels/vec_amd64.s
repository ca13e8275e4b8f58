//go:build amd64 && !purego

#include "textflag.h"

// func addToAVX2(dst, src *float32, n int)
TEXT ·addToAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX

loop32:
	CMPQ CX, $32
	JLT loop8
	VMOVUPS (SI)(AX*4), Y0
	VMOVUPS 32(SI)(AX*4), Y1
	VMOVUPS 64(SI)(AX*4), Y2
	VMOVUPS 96(SI)(AX*4), Y3
	VADDPS (DI)(AX*4), Y0, Y0
	VADDPS 32(DI)(AX*4), Y1, Y1
	VADDPS 64(DI)(AX*4), Y2, Y2
	VADDPS 96(DI)(AX*4), Y3, Y3
	VMOVUPS Y0, (DI)(AX*4)
	VMOVUPS Y1, 32(DI)(AX*4)
	VMOVUPS Y2, 64(DI)(AX*4)
	VMOVUPS Y3, 96(DI)(AX*4)
	ADDQ $32, AX
	SUBQ $32, CX
	JMP loop32

loop8:
	CMPQ CX, $8
	JLT tail
	VMOVUPS (SI)(AX*4), Y0
	VADDPS (DI)(AX*4), Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ $8, AX
	SUBQ $8, CX
	JMP loop8

tail:
	TESTQ CX, CX
	JZ done
	VMOVSS (SI)(AX*4), X0
	VADDSS (DI)(AX*4), X0, X0
	VMOVSS X0, (DI)(AX*4)
	INCQ AX
	DECQ CX
	JMP tail

done:
	VZEROUPPER
	RET

// func reluAVX2(dst, src *float32, n int)
// dst = src with the sign bit's lanes zeroed: negatives and -0 become +0,
// as nn's ReLU does.
TEXT ·reluAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX

rloop16:
	CMPQ CX, $16
	JLT rloop8
	VMOVDQU (SI)(AX*4), Y0
	VMOVDQU 32(SI)(AX*4), Y1
	VPSRAD $31, Y0, Y2
	VPSRAD $31, Y1, Y3
	VPANDN Y0, Y2, Y0
	VPANDN Y1, Y3, Y1
	VMOVDQU Y0, (DI)(AX*4)
	VMOVDQU Y1, 32(DI)(AX*4)
	ADDQ $16, AX
	SUBQ $16, CX
	JMP rloop16

rloop8:
	CMPQ CX, $8
	JLT rtail
	VMOVDQU (SI)(AX*4), Y0
	VPSRAD $31, Y0, Y2
	VPANDN Y0, Y2, Y0
	VMOVDQU Y0, (DI)(AX*4)
	ADDQ $8, AX
	SUBQ $8, CX
	JMP rloop8

rtail:
	TESTQ CX, CX
	JZ rdone
	MOVL (SI)(AX*4), BX
	MOVL BX, DX
	SARL $31, DX
	NOTL DX
	ANDL DX, BX
	MOVL BX, (DI)(AX*4)
	INCQ AX
	DECQ CX
	JMP rtail

rdone:
	VZEROUPPER
	RET

// func reluGradAVX2(dx, dy, y *float32, n int)
// dx = dy where y's bits, as an int32, are positive; 0 elsewhere.
TEXT ·reluGradAVX2(SB), NOSPLIT, $0-32
	MOVQ dx+0(FP), DI
	MOVQ dy+8(FP), SI
	MOVQ y+16(FP), R8
	MOVQ n+24(FP), CX
	XORQ AX, AX
	VPXOR Y7, Y7, Y7

gloop8:
	CMPQ CX, $8
	JLT gtail
	VMOVDQU (R8)(AX*4), Y0
	VPSUBD Y0, Y7, Y0 // -y
	VPSRAD $31, Y0, Y0 // all ones where -y < 0
	VPAND (SI)(AX*4), Y0, Y0
	VMOVDQU Y0, (DI)(AX*4)
	ADDQ $8, AX
	SUBQ $8, CX
	JMP gloop8

gtail:
	TESTQ CX, CX
	JZ gdone
	MOVL (R8)(AX*4), BX
	NEGL BX
	SARL $31, BX
	ANDL (SI)(AX*4), BX
	MOVL BX, (DI)(AX*4)
	INCQ AX
	DECQ CX
	JMP gtail

gdone:
	VZEROUPPER
	RET
