//go:build amd64 && !purego

#include "textflag.h"

// func adamAVX2(p, g, m, v []float32, lrt, c1, c2, eps float32)
//
// For each i, as the scalar kernel in rules.go:
//   m += (g - m) * c1
//   v += (g*g - v) * c2
//   p -= lrt*m / (sqrt(v) + eps)
TEXT ·adamAVX2(SB), NOSPLIT, $0-112
	MOVQ p_base+0(FP), DI
	MOVQ p_len+8(FP), CX
	MOVQ g_base+24(FP), SI
	MOVQ m_base+48(FP), R8
	MOVQ v_base+72(FP), R9
	VBROADCASTSS lrt+96(FP), Y12
	VBROADCASTSS c1+100(FP), Y13
	VBROADCASTSS c2+104(FP), Y14
	VBROADCASTSS eps+108(FP), Y15
	SHRQ $3, CX
	JZ   done

loop:
	VMOVUPS (SI), Y0      // g
	VMOVUPS (R8), Y1      // m
	VSUBPS  Y1, Y0, Y2    // g - m
	VMULPS  Y13, Y2, Y2   // (g - m) * c1
	VADDPS  Y2, Y1, Y1    // m'
	VMOVUPS Y1, (R8)
	VMOVUPS (R9), Y3      // v
	VMULPS  Y0, Y0, Y4    // g*g
	VSUBPS  Y3, Y4, Y4    // g*g - v
	VMULPS  Y14, Y4, Y4   // (g*g - v) * c2
	VADDPS  Y4, Y3, Y3    // v'
	VMOVUPS Y3, (R9)
	VSQRTPS Y3, Y5        // sqrt(v')
	VADDPS  Y15, Y5, Y5   // sqrt(v') + eps
	VMULPS  Y1, Y12, Y6   // lrt * m'
	VDIVPS  Y5, Y6, Y6    // lrt*m' / (sqrt(v') + eps)
	VMOVUPS (DI), Y7      // p
	VSUBPS  Y6, Y7, Y7
	VMOVUPS Y7, (DI)
	ADDQ    $32, SI
	ADDQ    $32, R8
	ADDQ    $32, R9
	ADDQ    $32, DI
	DECQ    CX
	JNZ     loop

done:
	VZEROUPPER
	RET
