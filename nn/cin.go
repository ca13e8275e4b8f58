package nn

import (
	"fmt"
	"math"
	"math/rand"
)

// CIN is the compressed interaction network of xDeepFM (Lian et al. 2018)
// over field embeddings x [N, F, D]. With X⁰ = x_n (F×D), layer k maps
// X^{k-1} (H_{k-1}×D) to
//
//	X^k_{h,d} = Σ_{i<H_{k-1}} Σ_{j<F} W^k_{h,(i,j)} · X^{k-1}_{i,d} · X⁰_{j,d}
//
// (explicit vector-wise interactions of degree k+1), and the output is
// every layer's feature maps sum-pooled over d, concatenated: [N, ΣH_k].
// Per record, layer k is one GEMM W^k (H_k × H_{k-1}F) · Z^k (H_{k-1}F × D)
// with Z^k_{(i,j),d} = X^{k-1}_{i,d} X⁰_{j,d}. There is no bias (the layer
// that reads the output has one). Backward is written out by hand:
//
//	dW^k += dX^k Z^kᵀ,  dZ^k = W^kᵀ dX^k,
//	dX^{k-1}_{i,d} += Σ_j dZ^k_{(i,j),d} X⁰_{j,d},  dX⁰_{j,d} += Σ_i dZ^k_{(i,j),d} X^{k-1}_{i,d},
//
// with dX^k_{h,d} = dy_{h_k} (the pooling) plus what layer k+1 sends back.
type CIN struct {
	name    string
	fields  int
	dim     int
	sizes   []int
	weights []*Param // weights[k]: [H_k, H_{k-1}·F]

	x  *Tensor     // input of the last Forward (not owned)
	xs [][]float32 // xs[k]: X^{k+1} of every record, [N, H_k, D]
	zs [][]float32 // zs[k]: Z^{k+1} of every record, [N, H_{k-1}·F, D]
	y  *Tensor
	dx *Tensor
	// backward scratch, per record
	dxk, dxprev, dz []float32
}

var _ Layer = (*CIN)(nil)

// NewCIN returns a CIN over fields embeddings of width dim with layers of
// sizes[k] feature maps; weights are drawn U(-l, l), l = sqrt(6/(fanIn+fanOut))
// with fanIn = H_{k-1}·F and fanOut = H_k.
func NewCIN(name string, fields, dim int, sizes []int, rng *rand.Rand) *CIN {
	if fields < 1 || dim < 1 || len(sizes) == 0 {
		panic(fmt.Sprintf("nn: CIN %s: fields %d, dim %d, sizes %v", name, fields, dim, sizes))
	}
	l := &CIN{name: name, fields: fields, dim: dim, sizes: append([]int(nil), sizes...)}
	prev := fields
	for k, h := range sizes {
		if h < 1 {
			panic(fmt.Sprintf("nn: CIN %s: layer %d of size %d", name, k, h))
		}
		p := newParam(fmt.Sprintf("%s/layer_%d/kernel", name, k), h, prev*fields)
		limit := math.Sqrt(6 / float64(prev*fields+h))
		for i := range p.Value.Data {
			p.Value.Data[i] = float32((2*rng.Float64() - 1) * limit)
		}
		l.weights = append(l.weights, p)
		prev = h
	}
	return l
}

// Name implements Layer.
func (l *CIN) Name() string { return l.name }

// Params implements Layer: one kernel per layer.
func (l *CIN) Params() []*Param { return l.weights }

// OutputSize is ΣH_k, the width of the output.
func (l *CIN) OutputSize() int {
	n := 0
	for _, h := range l.sizes {
		n += h
	}
	return n
}

// Forward implements Layer. x must be [N, fields, dim].
func (l *CIN) Forward(x *Tensor, train bool) *Tensor {
	if len(x.Shape) != 3 || x.Shape[1] != l.fields || x.Shape[2] != l.dim || len(x.Data) != x.Shape[0]*l.fields*l.dim {
		panic(fmt.Sprintf("nn: %s: input shape %v, want [N %d %d]", l.name, x.Shape, l.fields, l.dim))
	}
	n, f, d := x.Shape[0], l.fields, l.dim
	l.x = x
	if len(l.xs) != len(l.sizes) {
		l.xs = make([][]float32, len(l.sizes))
		l.zs = make([][]float32, len(l.sizes))
	}
	out := l.OutputSize()
	l.y = ensure(l.y, n, out)
	prev := f
	for k, h := range l.sizes {
		l.zs[k] = ensureFloat32(l.zs[k], n*prev*f*d)
		l.xs[k] = ensureFloat32(l.xs[k], n*h*d)
		prev = h
	}
	for r := 0; r < n; r++ {
		x0 := x.Data[r*f*d : (r+1)*f*d]
		xprev, prev := x0, f
		col := 0
		for k, h := range l.sizes {
			z := l.zs[k][r*prev*f*d : (r+1)*prev*f*d]
			for i := 0; i < prev; i++ {
				xi := xprev[i*d : (i+1)*d]
				for j := 0; j < f; j++ {
					x0j := x0[j*d : (j+1)*d]
					zij := z[(i*f+j)*d : (i*f+j+1)*d]
					for e := range zij {
						zij[e] = xi[e] * x0j[e]
					}
				}
			}
			xk := l.xs[k][r*h*d : (r+1)*h*d]
			gemm(false, false, h, d, prev*f, 1, l.weights[k].Value.Data, prev*f, z, d, 0, xk, d)
			yr := l.y.Data[r*out+col : r*out+col+h]
			for hh := 0; hh < h; hh++ {
				var s float32
				for _, v := range xk[hh*d : (hh+1)*d] {
					s += v
				}
				yr[hh] = s
			}
			col += h
			xprev, prev = xk, h
		}
	}
	return l.y
}

// Backward implements Layer.
func (l *CIN) Backward(dy *Tensor) *Tensor {
	if l.x == nil {
		panic(fmt.Sprintf("nn: %s: Backward before Forward", l.name))
	}
	n, f, d := l.x.Shape[0], l.fields, l.dim
	out := l.OutputSize()
	if len(dy.Data) != n*out {
		panic(fmt.Sprintf("nn: %s: Backward dy shape %v, want [%d %d]", l.name, dy.Shape, n, out))
	}
	l.dx = ensure(l.dx, n, f, d)
	maxH, maxZ := f, 0
	prev := f
	for _, h := range l.sizes {
		maxH = max(maxH, h)
		maxZ = max(maxZ, prev*f)
		prev = h
	}
	l.dxk = ensureFloat32(l.dxk, maxH*d)
	l.dxprev = ensureFloat32(l.dxprev, maxH*d)
	l.dz = ensureFloat32(l.dz, maxZ*d)
	last := len(l.sizes) - 1
	for r := 0; r < n; r++ {
		x0 := l.x.Data[r*f*d : (r+1)*f*d]
		dx0 := l.dx.Data[r*f*d : (r+1)*f*d]
		clear(dx0)
		// dxk holds dL/dX^k from the layers above; start at the top with zero.
		clear(l.dxk[:l.sizes[last]*d])
		col := out
		for k := last; k >= 0; k-- {
			h := l.sizes[k]
			col -= h
			prev := f
			xprev := x0
			if k > 0 {
				prev = l.sizes[k-1]
				xprev = l.xs[k-1][r*prev*d : (r+1)*prev*d]
			}
			dxk := l.dxk[:h*d]
			dyr := dy.Data[r*out+col : r*out+col+h]
			for hh := 0; hh < h; hh++ {
				g := dyr[hh]
				row := dxk[hh*d : (hh+1)*d]
				for e := range row {
					row[e] += g
				}
			}
			z := l.zs[k][r*prev*f*d : (r+1)*prev*f*d]
			// dW += dX^k Z^T: [h, d] x [d, prev*f].
			gemm(false, true, h, prev*f, d, 1, dxk, d, z, d, 1, l.weights[k].Grad.Data, prev*f)
			// dZ = W^T dX^k: [prev*f, h] x [h, d].
			dz := l.dz[:prev*f*d]
			gemm(true, false, prev*f, d, h, 1, l.weights[k].Value.Data, prev*f, dxk, d, 0, dz, d)
			dxprev := l.dxprev[:prev*d]
			clear(dxprev)
			for i := 0; i < prev; i++ {
				xi := xprev[i*d : (i+1)*d]
				dxi := dxprev[i*d : (i+1)*d]
				for j := 0; j < f; j++ {
					x0j := x0[j*d : (j+1)*d]
					dx0j := dx0[j*d : (j+1)*d]
					dzij := dz[(i*f+j)*d : (i*f+j+1)*d]
					for e, g := range dzij {
						dxi[e] += g * x0j[e]
						dx0j[e] += g * xi[e]
					}
				}
			}
			if k == 0 {
				// X^{k-1} is X⁰ itself.
				for e, v := range dxprev {
					dx0[e] += v
				}
			} else {
				copy(l.dxk[:prev*d], dxprev)
			}
		}
	}
	return l.dx
}
