//go:build amd64 && !purego

package kernels

import (
	"sync"

	"golang.org/x/sys/cpu"
)

// GemmEnabled reports whether Sgemm runs on this CPU (AVX2 and FMA).
var GemmEnabled = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func sgemm6x16(k int, a *float32, rs, cs int, b *float32, bs int, c *float32, ldc int, alpha float32, overwrite bool, bias *float32)

// Register blocking of the micro-kernel and cache blocking of B.
const (
	gemmMR = 6
	gemmNR = 16
	gemmKC = 256 // rows of a packed B block: a 6xKC sliver of A stays in L1
	gemmNC = 512 // columns of a packed B block: KCxNC floats stay in L2
)

type gemmBufs struct {
	b [gemmKC * gemmNC]float32
	a [gemmMR * gemmKC]float32 // A's last rows, zero-padded to 6
}

// gemmFree holds the buffers of finished calls for the next ones: one per
// concurrent caller at most, never dropped (unlike a sync.Pool's, so a
// warm training step stays free of allocations, also under -race).
var gemmFree struct {
	sync.Mutex
	bufs []*gemmBufs
}

func getGemmBufs() *gemmBufs {
	gemmFree.Lock()
	defer gemmFree.Unlock()
	if n := len(gemmFree.bufs); n > 0 {
		b := gemmFree.bufs[n-1]
		gemmFree.bufs = gemmFree.bufs[:n-1]
		return b
	}
	return new(gemmBufs)
}

func putGemmBufs(b *gemmBufs) {
	gemmFree.Lock()
	gemmFree.bufs = append(gemmFree.bufs, b)
	gemmFree.Unlock()
}

// Sgemm computes C = alpha*op(A)*op(B) + beta*C on row-major matrices
// (op(A) m×k, op(B) k×n, C m×n), as BLAS sgemm, and reports true; it
// reports false, doing nothing, when not GemmEnabled. It runs on the
// calling goroutine: a 6x16 AVX2/FMA micro-kernel reads A in place (either
// layout) and B in place too when it is not transposed; a transposed B,
// and the last columns of any, are packed in 256x512 blocks of 16-column
// panels. With beta 0 the first pass over k stores C without reading it.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) bool {
	if !GemmEnabled {
		return false
	}
	sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, nil)
	return true
}

// SgemmBias computes C = op(A)*op(B) + 1*biasᵀ (bias added to every row
// of C, len(bias) >= n) in one pass over C, and reports true; it reports
// false, doing nothing, when not GemmEnabled.
func SgemmBias(transA, transB bool, m, n, k int, a []float32, lda int,
	b []float32, ldb int, bias, c []float32, ldc int) bool {
	if !GemmEnabled {
		return false
	}
	bias = bias[:n]
	if k <= 0 {
		for i := 0; i < m; i++ {
			copy(c[i*ldc:i*ldc+n], bias)
		}
		return true
	}
	sgemm(transA, transB, m, n, k, 1, a, lda, b, ldb, 0, c, ldc, bias)
	return true
}

// sgemm is Sgemm, adding bias to C's rows on the first pass when beta is
// 0 and bias is not nil (k > 0 and alpha != 0 then).
func sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	if m <= 0 || n <= 0 {
		return
	}
	_ = c[(m-1)*ldc+n-1]
	if k <= 0 || alpha == 0 || (beta != 0 && beta != 1) {
		scaleC(m, n, beta, c, ldc)
		beta = 1
	}
	if k <= 0 || alpha == 0 {
		return
	}
	// Element (i, p) of op(A) is a[i*ars + p*acs].
	g := gemmOp{m: m, alpha: alpha, a: a, ars: lda, acs: 1, b: b, ldb: ldb, c: c, ldc: ldc, bias: bias}
	if transA {
		g.ars, g.acs = 1, lda
		_ = a[(k-1)*lda+m-1]
	} else {
		_ = a[(m-1)*lda+k-1]
	}
	if transB {
		_ = b[(n-1)*ldb+k-1]
	} else {
		_ = b[(k-1)*ldb+n-1]
	}
	bufs := getGemmBufs()
	for jc := 0; jc < n; jc += gemmNC {
		nc := min(gemmNC, n-jc)
		// A B not transposed is read in place but for its last, partial
		// panel; full panels of a transposed one are packed too.
		packed := nc
		if !transB {
			packed = nc % gemmNR
		}
		for pc := 0; pc < k; pc += gemmKC {
			kc := min(gemmKC, k-pc)
			if packed > 0 {
				packB(bufs.b[:], b, ldb, transB, pc, jc+nc-packed, kc, packed)
			}
			g.block(bufs, jc, nc, packed, pc, kc, beta == 0 && pc == 0)
		}
	}
	putGemmBufs(bufs)
}

// scaleC does C *= beta on C's m×n elements (clearing them for beta 0, so
// that NaNs in C do not survive).
func scaleC(m, n int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// gemmOp holds one sgemm call's operands, fixed across its blocks.
type gemmOp struct {
	m        int
	alpha    float32
	a        []float32
	ars, acs int // element (i, p) of op(A) is a[i*ars + p*acs]
	b        []float32
	ldb      int
	c        []float32
	ldc      int
	bias     []float32
}

// block adds alpha*op(A)[:, pc:pc+kc]*op(B)[pc:pc+kc, jc:jc+nc] to C's
// columns jc:jc+nc (stores it, with the bias if any, when over), 6x16
// tiles at a time; B's last packed columns are in bufs.b.
func (g *gemmOp) block(bufs *gemmBufs, jc, nc, packed, pc, kc int, over bool) {
	var tile [gemmMR * gemmNR]float32
	for ir := 0; ir < g.m; ir += gemmMR {
		mh := min(gemmMR, g.m-ir)
		ap, rs, cs := g.sliverA(bufs, ir, mh, pc, kc)
		for jr := 0; jr < nc; jr += gemmNR {
			var bp *float32
			bs := gemmNR
			if p := jr - (nc - packed); p >= 0 {
				bp = &bufs.b[p*kc]
			} else {
				bp, bs = &g.b[pc*g.ldb+jc+jr], g.ldb
			}
			nw := min(gemmNR, nc-jr)
			ci := ir*g.ldc + jc + jr
			var bb []float32 // this panel's bias, on the first pass
			if over && g.bias != nil {
				bb = g.bias[jc+jr : jc+jr+nw]
			}
			if mh == gemmMR && nw == gemmNR {
				var bptr *float32
				if bb != nil {
					bptr = &bb[0]
				}
				sgemm6x16(kc, ap, rs*4, cs*4, bp, bs*4, &g.c[ci], g.ldc, g.alpha, over, bptr)
				continue
			}
			sgemm6x16(kc, ap, rs*4, cs*4, bp, bs*4, &tile[0], gemmNR, g.alpha, true, nil)
			g.storeEdge(&tile, ci, mh, nw, bb, over)
		}
	}
}

// sliverA returns the kernel's view of op(A)[ir:ir+6, pc:pc+kc]: its
// start and its row and column strides in elements.
func (g *gemmOp) sliverA(bufs *gemmBufs, ir, mh, pc, kc int) (ap *float32, rs, cs int) {
	// The last rows' sliver is read in place too while all 6 rows'
	// elements lie inside a (the extra rows' products are computed and
	// dropped).
	if mh == gemmMR || (ir+gemmMR-1)*g.ars+(pc+kc-1)*g.acs < len(g.a) {
		return &g.a[ir*g.ars+pc*g.acs], g.ars, g.acs
	}
	// Copy the last rows, zero-padded, so the kernel reads nothing past
	// A: element (r, q) at r + 6q.
	pa := bufs.a[:gemmMR*kc]
	clear(pa)
	for r := 0; r < mh; r++ {
		for q := 0; q < kc; q++ {
			pa[r+gemmMR*q] = g.a[(ir+r)*g.ars+(pc+q)*g.acs]
		}
	}
	return &pa[0], 1, gemmMR
}

// storeEdge moves a partial tile's mh×nw corner of tile into C at ci:
// stored with the bias bb when there is one, stored when over, else added.
func (g *gemmOp) storeEdge(tile *[gemmMR * gemmNR]float32, ci, mh, nw int, bb []float32, over bool) {
	for r := 0; r < mh; r++ {
		row := g.c[ci+r*g.ldc : ci+r*g.ldc+nw]
		t := tile[r*gemmNR : r*gemmNR+nw]
		switch {
		case bb != nil:
			for j := range row {
				row[j] = t[j] + bb[j]
			}
		case over:
			copy(row, t)
		default:
			for j := range row {
				row[j] += t[j]
			}
		}
	}
}

// packB copies op(B)[pc:pc+kc, jc:jc+nc] into dst as 16-column panels,
// each kc rows of 16 floats, zero-padding the last panel's columns.
func packB(dst, b []float32, ldb int, transB bool, pc, jc, kc, nc int) {
	for jr := 0; jr < nc; jr += gemmNR {
		nw := min(gemmNR, nc-jr)
		panel := dst[jr*kc : jr*kc+kc*gemmNR]
		if !transB {
			for q := 0; q < kc; q++ {
				src := b[(pc+q)*ldb+jc+jr : (pc+q)*ldb+jc+jr+nw]
				d := panel[q*gemmNR : q*gemmNR+gemmNR]
				copy(d, src)
				if nw < gemmNR {
					clear(d[nw:])
				}
			}
			continue
		}
		if nw < gemmNR {
			clear(panel)
		}
		for j := 0; j < nw; j++ {
			src := b[(jc+jr+j)*ldb+pc : (jc+jr+j)*ldb+pc+kc]
			for q, v := range src {
				panel[q*gemmNR+j] = v
			}
		}
	}
}
