package nn

import "fmt"

// FMInteraction is the pairwise term of a factorization machine over field
// embeddings: for x [N, F, D] (one D-wide embedding per field) it outputs
// [N, 1] with
//
//	y_n = Σ_{i<j} <x_ni, x_nj> = ½ Σ_d ((Σ_f x_nfd)² − Σ_f x_nfd²)
//
// computed in O(F·D) (Rendle 2010). It has no parameters.
type FMInteraction struct {
	name string
	x    *Tensor // input of the last Forward (not owned)
	sum  []float32
	y    *Tensor
	dx   *Tensor
}

var _ Layer = (*FMInteraction)(nil)

// NewFMInteraction returns an FMInteraction.
func NewFMInteraction(name string) *FMInteraction { return &FMInteraction{name: name} }

// Name implements Layer.
func (l *FMInteraction) Name() string { return l.name }

// Params implements Layer: none.
func (l *FMInteraction) Params() []*Param { return nil }

// Forward implements Layer. x must be [N, F, D].
func (l *FMInteraction) Forward(x *Tensor, train bool) *Tensor {
	if len(x.Shape) != 3 || len(x.Data) != x.Shape[0]*x.Shape[1]*x.Shape[2] {
		panic(fmt.Sprintf("nn: %s: input shape %v, want [N F D]", l.name, x.Shape))
	}
	n, f, d := x.Shape[0], x.Shape[1], x.Shape[2]
	l.x = x
	l.sum = ensureFloat32(l.sum, n*d)
	clear(l.sum)
	l.y = ensure(l.y, n, 1)
	for r := 0; r < n; r++ {
		s := l.sum[r*d : (r+1)*d]
		var sq float64
		for k := 0; k < f; k++ {
			row := x.Data[(r*f+k)*d : (r*f+k+1)*d]
			for j, v := range row {
				s[j] += v
				sq += float64(v) * float64(v)
			}
		}
		var ss float64
		for _, v := range s {
			ss += float64(v) * float64(v)
		}
		l.y.Data[r] = float32(0.5 * (ss - sq))
	}
	return l.y
}

// Backward implements Layer: dL/dx_nfd = dy_n · (Σ_f' x_nf'd − x_nfd).
func (l *FMInteraction) Backward(dy *Tensor) *Tensor {
	if l.x == nil {
		panic(fmt.Sprintf("nn: %s: Backward before Forward", l.name))
	}
	n, f, d := l.x.Shape[0], l.x.Shape[1], l.x.Shape[2]
	if len(dy.Data) != n {
		panic(fmt.Sprintf("nn: %s: Backward dy shape %v, want [%d 1]", l.name, dy.Shape, n))
	}
	l.dx = ensure(l.dx, n, f, d)
	for r := 0; r < n; r++ {
		g := dy.Data[r]
		s := l.sum[r*d : (r+1)*d]
		for k := 0; k < f; k++ {
			at := (r*f + k) * d
			for j := 0; j < d; j++ {
				l.dx.Data[at+j] = g * (s[j] - l.x.Data[at+j])
			}
		}
	}
	return l.dx
}
