//go:build amd64 && !purego

#include "textflag.h"

// func putBF16AVX2(dst []byte, src []float32)
// len(src) is a multiple of 16; dst holds 2*len(src) bytes. Per element,
// as toBF16: h = (b + 0x7fff + (b>>16)&1) >> 16, or (b>>16)|0x40 for a NaN.
TEXT ·putBF16AVX2(SB), NOSPLIT, $0-48
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ src_len+32(FP), CX
	SHRQ $4, CX
	JZ   pdone
	MOVL $0x7fff, AX
	MOVD AX, X10
	VPBROADCASTD X10, Y10
	MOVL $1, AX
	MOVD AX, X11
	VPBROADCASTD X11, Y11
	MOVL $0x7fffffff, AX
	MOVD AX, X12
	VPBROADCASTD X12, Y12
	MOVL $0x7f800000, AX
	MOVD AX, X13
	VPBROADCASTD X13, Y13
	MOVL $0x40, AX
	MOVD AX, X14
	VPBROADCASTD X14, Y14

ploop:
	VMOVDQU (SI), Y0
	VPSRLD    $16, Y0, Y2
	VPAND     Y11, Y2, Y3
	VPADDD    Y10, Y3, Y3
	VPADDD    Y3, Y0, Y3
	VPSRLD    $16, Y3, Y3
	VPAND     Y12, Y0, Y4
	VPCMPGTD  Y13, Y4, Y4
	VPOR      Y14, Y2, Y5
	VPBLENDVB Y4, Y5, Y3, Y3

	VMOVDQU 32(SI), Y1
	VPSRLD    $16, Y1, Y2
	VPAND     Y11, Y2, Y6
	VPADDD    Y10, Y6, Y6
	VPADDD    Y6, Y1, Y6
	VPSRLD    $16, Y6, Y6
	VPAND     Y12, Y1, Y4
	VPCMPGTD  Y13, Y4, Y4
	VPOR      Y14, Y2, Y5
	VPBLENDVB Y4, Y5, Y6, Y6

	VPACKUSDW Y6, Y3, Y7
	VPERMQ    $0xD8, Y7, Y7
	VMOVDQU   Y7, (DI)
	ADDQ $64, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  ploop

pdone:
	VZEROUPPER
	RET

// func getBF16AVX2(dst []float32, src []byte)
// len(dst) is a multiple of 16; src holds 2*len(dst) bytes.
TEXT ·getBF16AVX2(SB), NOSPLIT, $0-48
	MOVQ dst_base+0(FP), DI
	MOVQ dst_len+8(FP), CX
	MOVQ src_base+24(FP), SI
	SHRQ $4, CX
	JZ   gdone

gloop:
	VPMOVZXWD (SI), Y0
	VPMOVZXWD 16(SI), Y1
	VPSLLD    $16, Y0, Y0
	VPSLLD    $16, Y1, Y1
	VMOVDQU   Y0, (DI)
	VMOVDQU   Y1, 32(DI)
	ADDQ $32, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  gloop

gdone:
	VZEROUPPER
	RET
