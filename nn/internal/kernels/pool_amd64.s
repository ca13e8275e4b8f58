//go:build amd64 && !purego

#include "textflag.h"

DATA iota8<>+0(SB)/4, $0
DATA iota8<>+4(SB)/4, $1
DATA iota8<>+8(SB)/4, $2
DATA iota8<>+12(SB)/4, $3
DATA iota8<>+16(SB)/4, $4
DATA iota8<>+20(SB)/4, $5
DATA iota8<>+24(SB)/4, $6
DATA iota8<>+28(SB)/4, $7
GLOBL iota8<>(SB), RODATA|NOPTR, $32

// func maxPool2x2RowAVX2(r0, r1, out *float32, idx *int32, ow, c, rowLen int, base int32)
//
// Y0: running max, Y1: its index, Y2..Y4: candidates, Y5: mask,
// Y6: flat index of the current channel block in r0's first pixel,
// Y7: 8 (block step), Y8: c, Y9: rowLen, Y10: rowLen+c, Y11: c (per window
// the index moves 2c, of which the block loop adds c).
TEXT ·maxPool2x2RowAVX2(SB), NOSPLIT, $0-60
	MOVQ r0+0(FP), SI
	MOVQ r1+8(FP), DI
	MOVQ out+16(FP), DX
	MOVQ idx+24(FP), R8
	MOVQ ow+32(FP), R9
	MOVQ c+40(FP), R10
	MOVQ rowLen+48(FP), R11
	MOVL base+56(FP), AX

	// Y6 = base + iota
	MOVL AX, X6
	VPBROADCASTD X6, Y6
	VPADDD iota8<>(SB), Y6, Y6
	MOVL $8, AX
	MOVL AX, X7
	VPBROADCASTD X7, Y7
	MOVL R10, AX
	MOVL AX, X8
	VPBROADCASTD X8, Y8
	MOVL R11, AX
	MOVL AX, X9
	VPBROADCASTD X9, Y9
	VPADDD Y8, Y9, Y10

	MOVQ R10, R12
	SHLQ $2, R12 // c in bytes

window:
	MOVQ R10, CX     // channels left
	MOVQ SI, R13     // r0 pixel 0
	LEAQ (SI)(R12*1), R14 // r0 pixel 1
	MOVQ DI, R11     // r1 pixel 0
	LEAQ (DI)(R12*1), BX  // r1 pixel 1
	XORQ AX, AX      // byte offset in the block

block:
	VMOVUPS (R13)(AX*1), Y0
	VMOVDQU Y6, Y1

	VMOVUPS (R14)(AX*1), Y2
	VCMPPS $0x1e, Y0, Y2, Y5 // Y5 = Y2 > Y0 (ordered)
	VBLENDVPS Y5, Y2, Y0, Y0
	VPADDD Y8, Y6, Y3
	VBLENDVPS Y5, Y3, Y1, Y1

	VMOVUPS (R11)(AX*1), Y2
	VCMPPS $0x1e, Y0, Y2, Y5
	VBLENDVPS Y5, Y2, Y0, Y0
	VPADDD Y9, Y6, Y3
	VBLENDVPS Y5, Y3, Y1, Y1

	VMOVUPS (BX)(AX*1), Y2
	VCMPPS $0x1e, Y0, Y2, Y5
	VBLENDVPS Y5, Y2, Y0, Y0
	VPADDD Y10, Y6, Y3
	VBLENDVPS Y5, Y3, Y1, Y1

	VMOVUPS Y0, (DX)(AX*1)
	VMOVDQU Y1, (R8)(AX*1)

	VPADDD Y7, Y6, Y6
	ADDQ $32, AX
	SUBQ $8, CX
	JNZ block

	// Next window: inputs move 2c, outputs c; the index already moved c.
	ADDQ R12, DX
	ADDQ R12, R8
	LEAQ (SI)(R12*2), SI
	LEAQ (DI)(R12*2), DI
	VPADDD Y8, Y6, Y6
	DECQ R9
	JNZ window

	VZEROUPPER
	RET

// func maxPool2x2BackRowAVX2(r0, r1, dy *float32, idx *int32, ow, c, rowLen int, base int32)
//
// The adjoint of maxPool2x2RowAVX2 for tiling windows: each of the 4*ow*c
// input gradients of the two rows r0, r1 is written once, the output
// gradient where the window's argmax index names it and 0 elsewhere.
TEXT ·maxPool2x2BackRowAVX2(SB), NOSPLIT, $0-60
	MOVQ r0+0(FP), SI
	MOVQ r1+8(FP), DI
	MOVQ dy+16(FP), DX
	MOVQ idx+24(FP), R8
	MOVQ ow+32(FP), R9
	MOVQ c+40(FP), R10
	MOVQ rowLen+48(FP), R11
	MOVL base+56(FP), AX

	MOVL AX, X6
	VPBROADCASTD X6, Y6
	VPADDD iota8<>(SB), Y6, Y6
	MOVL $8, AX
	MOVL AX, X7
	VPBROADCASTD X7, Y7
	MOVL R10, AX
	MOVL AX, X8
	VPBROADCASTD X8, Y8
	MOVL R11, AX
	MOVL AX, X9
	VPBROADCASTD X9, Y9
	VPADDD Y8, Y9, Y10

	MOVQ R10, R12
	SHLQ $2, R12 // c in bytes

bwindow:
	MOVQ R10, CX
	MOVQ SI, R13
	LEAQ (SI)(R12*1), R14
	MOVQ DI, R11
	LEAQ (DI)(R12*1), BX
	XORQ AX, AX

bblock:
	VMOVUPS (DX)(AX*1), Y0 // gradient
	VMOVDQU (R8)(AX*1), Y1 // argmax index

	VPCMPEQD Y6, Y1, Y2
	VPAND Y0, Y2, Y2
	VMOVUPS Y2, (R13)(AX*1)

	VPADDD Y8, Y6, Y3
	VPCMPEQD Y3, Y1, Y2
	VPAND Y0, Y2, Y2
	VMOVUPS Y2, (R14)(AX*1)

	VPADDD Y9, Y6, Y3
	VPCMPEQD Y3, Y1, Y2
	VPAND Y0, Y2, Y2
	VMOVUPS Y2, (R11)(AX*1)

	VPADDD Y10, Y6, Y3
	VPCMPEQD Y3, Y1, Y2
	VPAND Y0, Y2, Y2
	VMOVUPS Y2, (BX)(AX*1)

	VPADDD Y7, Y6, Y6
	ADDQ $32, AX
	SUBQ $8, CX
	JNZ bblock

	ADDQ R12, DX
	ADDQ R12, R8
	LEAQ (SI)(R12*2), SI
	LEAQ (DI)(R12*2), DI
	VPADDD Y8, Y6, Y6
	DECQ R9
	JNZ bwindow

	VZEROUPPER
	RET
