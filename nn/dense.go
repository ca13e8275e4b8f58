package nn

import (
	"fmt"
	"math/rand"

	"gonum.org/v1/gonum/blas"
)

// Dense is a fully connected layer: y = x·kernel + bias, x [N,in] → [N,out].
type Dense struct {
	name    string
	in, out int
	kernel  *Param // [in,out]
	bias    *Param // [out]
	params  []*Param

	x   *Tensor // input of the last Forward (not owned)
	y   *Tensor
	dx  *Tensor
	one []float32
}

// NewDense returns a Dense layer with a He-uniform kernel and zero bias
// (see Initialize for Glorot).
// Parameters are named name+"/kernel" and name+"/bias".
func NewDense(name string, in, out int, rng *rand.Rand) *Dense {
	if in <= 0 || out <= 0 {
		panic(fmt.Sprintf("nn: NewDense(%q): bad sizes in=%d out=%d", name, in, out))
	}
	d := &Dense{
		name:   name,
		in:     in,
		out:    out,
		kernel: newParam(name+"/kernel", in, out),
		bias:   newParam(name+"/bias", out),
	}
	d.params = []*Param{d.kernel, d.bias}
	d.Initialize(HeUniform, rng)
	return d
}

// Name implements Layer.
func (d *Dense) Name() string { return d.name }

// Params implements Layer: kernel, then bias. The slice is shared;
// callers must not modify it.
func (d *Dense) Params() []*Param { return d.params }

// Initialize redraws the kernel with kind and zeroes the bias.
func (d *Dense) Initialize(kind Initializer, rng *rand.Rand) {
	initUniform(d.kernel.Value.Data, kind, d.in, d.out, rng)
	clear(d.bias.Value.Data)
}

// Kernel returns the [in,out] kernel parameter.
func (d *Dense) Kernel() *Param { return d.kernel }

// Bias returns the [out] bias parameter.
func (d *Dense) Bias() *Param { return d.bias }

// Forward implements Layer.
func (d *Dense) Forward(x *Tensor, train bool) *Tensor {
	checkRank(d.name, x, 2)
	if x.Shape[1] != d.in {
		panic(fmt.Sprintf("nn: %s: input width %d, want %d", d.name, x.Shape[1], d.in))
	}
	n := x.Shape[0]
	d.x = x
	d.y = ensure(d.y, n, d.out)
	d.one = ones(d.one, n)
	gemmBias(n, d.out, d.in, x.Data, d.kernel.Value.Data, d.bias.Value.Data, d.y.Data)
	return d.y
}

// Backward implements Layer.
func (d *Dense) Backward(dy *Tensor) *Tensor {
	d.BackwardParams(dy)
	n := dy.Shape[0]
	d.dx = ensure(d.dx, n, d.in)
	// dx = dy·kernelᵀ
	gemm(false, true, n, d.in, d.out, 1, dy.Data, d.out, d.kernel.Value.Data, d.out, 0, d.dx.Data, d.in)
	return d.dx
}

// BackwardParams implements ParamBackwarder.
func (d *Dense) BackwardParams(dy *Tensor) {
	n := dy.Shape[0]
	if d.x == nil || !sameShape(dy.Shape, []int{d.x.Shape[0], d.out}) {
		panic(fmt.Sprintf("nn: %s: Backward dy shape %v does not match last Forward", d.name, dy.Shape))
	}
	// dKernel += xᵀ·dy
	gemm(true, false, d.in, d.out, n, 1, d.x.Data, d.in, dy.Data, d.out, 1, d.kernel.Grad.Data, d.out)
	addColumnSums(d.bias.Grad.Data, dy.Data, d.one, n, d.out)
}

// ones returns a slice of n ones, reusing buf. Bias broadcasts and
// reductions are rank-1 products with it, which BLAS vectorizes; the
// scalar Go loops they replace were ~5% of a CNN step.
func ones(buf []float32, n int) []float32 {
	if cap(buf) >= n && len(buf) >= n {
		return buf[:n]
	}
	buf = make([]float32, n)
	for i := range buf {
		buf[i] = 1
	}
	return buf
}

// setRowsToBias sets every row of the rows×cols matrix y to bias: the
// first row is bias, then the filled prefix is copied onto what follows,
// doubling each time, so the work is a few long memmoves (a k=1 GEMM did
// this at a third of the speed).
func setRowsToBias(y, bias []float32, rows, cols int) {
	n := rows * cols
	if n == 0 {
		return
	}
	y = y[:n]
	done := copy(y, bias[:cols])
	for done < n {
		done += copy(y[done:], y[:done])
	}
}

// addColumnSums adds the column sums of the rows×cols matrix m to dst:
// dst += mᵀ·1, a matrix-vector product (a 1-row GEMM ran at half its
// speed).
func addColumnSums(dst, m, one []float32, rows, cols int) {
	if rows == 0 || cols == 0 {
		return
	}
	var impl blasImpl
	impl.Sgemv(blas.Trans, rows, cols, 1, m, cols, one, 1, 1, dst, 1)
}
