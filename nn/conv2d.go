package nn

import (
	"fmt"
	"math/rand"

	"elasticdl/nn/internal/kernels"
)

// Padding selects how Conv2D treats image borders.
type Padding int

const (
	// Valid uses no padding: out = floor((in-k)/stride)+1.
	Valid Padding = iota
	// Same zero-pads so that out = ceil(in/stride), splitting the padding
	// like TensorFlow (the extra pixel, if any, goes bottom/right).
	Same
)

// String implements fmt.Stringer.
func (p Padding) String() string {
	switch p {
	case Valid:
		return "valid"
	case Same:
		return "same"
	}
	return fmt.Sprintf("Padding(%d)", int(p))
}

// convGeom is the geometry of one convolution call.
type convGeom struct {
	n, h, w, c     int // input
	oh, ow         int // output spatial size
	kh, kw, stride int
	padT, padL     int
}

// outSize returns the output size and leading padding along one axis.
func outSize(in, k, stride int, p Padding) (out, padBefore int) {
	if p == Same {
		out = (in + stride - 1) / stride
		total := max((out-1)*stride+k-in, 0)
		return out, total / 2
	}
	if in < k {
		return 0, 0
	}
	return (in-k)/stride + 1, 0
}

// Conv2D is a 2-D convolution on NHWC input [N,H,W,inC] with kernel
// [kH,kW,inC,outC] and bias [outC], implemented as im2col + one GEMM.
type Conv2D struct {
	name           string
	inC, outC      int
	kH, kW, stride int
	padding        Padding
	kernel, bias   *Param
	params         []*Param
	g              convGeom
	x              *Tensor // last input (not owned)
	cols, dcols    []float32
	pad            []float32 // one zero-padded image, for im2col1x3x3
	one            []float32 // all ones, for bias broadcast/reduction
	y, dx          *Tensor
}

// NewConv2D returns a Conv2D with a He-uniform kernel and zero bias (see
// Initialize for Glorot).
// Parameters are named name+"/kernel" and name+"/bias".
func NewConv2D(name string, inC, outC, kH, kW, stride int, padding Padding, rng *rand.Rand) *Conv2D {
	if inC <= 0 || outC <= 0 || kH <= 0 || kW <= 0 || stride <= 0 {
		panic(fmt.Sprintf("nn: NewConv2D(%q): bad sizes inC=%d outC=%d k=%dx%d stride=%d",
			name, inC, outC, kH, kW, stride))
	}
	if padding != Valid && padding != Same {
		panic(fmt.Sprintf("nn: NewConv2D(%q): bad padding %v", name, padding))
	}
	c := &Conv2D{
		name: name, inC: inC, outC: outC, kH: kH, kW: kW, stride: stride, padding: padding,
		kernel: newParam(name+"/kernel", kH, kW, inC, outC),
		bias:   newParam(name+"/bias", outC),
	}
	c.params = []*Param{c.kernel, c.bias}
	c.Initialize(HeUniform, rng)
	return c
}

// Name implements Layer.
func (c *Conv2D) Name() string { return c.name }

// Params implements Layer: kernel, then bias. The slice is shared;
// callers must not modify it.
func (c *Conv2D) Params() []*Param { return c.params }

// Initialize redraws the kernel with kind (fanIn = kH*kW*inC, fanOut =
// kH*kW*outC, as in Keras) and zeroes the bias.
func (c *Conv2D) Initialize(kind Initializer, rng *rand.Rand) {
	initUniform(c.kernel.Value.Data, kind, c.kH*c.kW*c.inC, c.kH*c.kW*c.outC, rng)
	clear(c.bias.Value.Data)
}

// Kernel returns the [kH,kW,inC,outC] kernel parameter.
func (c *Conv2D) Kernel() *Param { return c.kernel }

// Bias returns the [outC] bias parameter.
func (c *Conv2D) Bias() *Param { return c.bias }

// OutputShape returns the NHWC output shape for an NHWC input shape.
func (c *Conv2D) OutputShape(in []int) []int {
	oh, _ := outSize(in[1], c.kH, c.stride, c.padding)
	ow, _ := outSize(in[2], c.kW, c.stride, c.padding)
	return []int{in[0], oh, ow, c.outC}
}

// Forward implements Layer.
func (c *Conv2D) Forward(x *Tensor, train bool) *Tensor {
	checkRank(c.name, x, 4)
	if x.Shape[3] != c.inC {
		panic(fmt.Sprintf("nn: %s: input has %d channels, want %d", c.name, x.Shape[3], c.inC))
	}
	g := convGeom{n: x.Shape[0], h: x.Shape[1], w: x.Shape[2], c: c.inC, kh: c.kH, kw: c.kW, stride: c.stride}
	g.oh, g.padT = outSize(g.h, c.kH, c.stride, c.padding)
	g.ow, g.padL = outSize(g.w, c.kW, c.stride, c.padding)
	c.g, c.x = g, x

	rows, k := g.n*g.oh*g.ow, c.kH*c.kW*c.inC
	c.y = ensure(c.y, g.n, g.oh, g.ow, c.outC)
	if rows == 0 {
		return c.y
	}
	c.cols = growFloat32(c.cols, rows*k)
	if g.c == 1 && g.kh == 3 && g.kw == 3 && g.stride == 1 {
		c.pad = im2col1x3x3(c.cols, x.Data, g, c.pad)
	} else {
		im2col(c.cols, x.Data, g)
	}
	c.one = ones(c.one, rows)
	gemmBias(rows, c.outC, k, c.cols, c.kernel.Value.Data, c.bias.Value.Data, c.y.Data)
	return c.y
}

// Backward implements Layer.
func (c *Conv2D) Backward(dy *Tensor) *Tensor {
	c.BackwardParams(dy)
	g := c.g
	rows, k := g.n*g.oh*g.ow, c.kH*c.kW*c.inC
	c.dx = ensure(c.dx, g.n, g.h, g.w, g.c)
	// 1x1 stride-1 convolutions need no col2im: dcols is dx itself.
	if rows > 0 && c.kH == 1 && c.kW == 1 && c.stride == 1 {
		gemm(false, true, rows, k, c.outC, 1, dy.Data, c.outC, c.kernel.Value.Data, c.outC, 0, c.dx.Data, k)
		return c.dx
	}
	clear(c.dx.Data) // col2im accumulates, and skipped pixels must read 0
	if rows == 0 {
		return c.dx
	}
	c.dcols = growFloat32(c.dcols, rows*k)
	gemm(false, true, rows, k, c.outC, 1, dy.Data, c.outC, c.kernel.Value.Data, c.outC, 0, c.dcols, k)
	col2im(c.dx.Data, c.dcols, g)
	return c.dx
}

// BackwardParams implements ParamBackwarder.
func (c *Conv2D) BackwardParams(dy *Tensor) {
	g := c.g
	if c.x == nil || !sameShape(dy.Shape, c.y.Shape) {
		panic(fmt.Sprintf("nn: %s: Backward dy shape %v does not match last Forward", c.name, dy.Shape))
	}
	rows, k := g.n*g.oh*g.ow, c.kH*c.kW*c.inC
	if rows == 0 {
		return
	}
	// dKernel += colsᵀ·dy
	gemm(true, false, k, c.outC, rows, 1, c.cols, k, dy.Data, c.outC, 1, c.kernel.Grad.Data, c.outC)
	addColumnSums(c.bias.Grad.Data, dy.Data, c.one, rows, c.outC)
}

// growFloat32 returns a length-n slice, reusing b's storage when possible.
// Contents are unspecified; callers overwrite them.
func growFloat32(b []float32, n int) []float32 {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]float32, n)
}

// im2col writes one row per output position (n,oh,ow) holding the
// receptive field in (kh,kw,c) order, matching the kernel's
// [kH*kW*inC, outC] reshape. In NHWC the kW*C values of one kernel row are
// contiguous in x, so the interior is a single copy per kernel row.
func im2col(cols, x []float32, g convGeom) {
	k := g.kh * g.kw * g.c
	seg := g.kw * g.c
	r := 0
	for n := 0; n < g.n; n++ {
		img := x[n*g.h*g.w*g.c : (n+1)*g.h*g.w*g.c]
		for oh := 0; oh < g.oh; oh++ {
			ih0 := oh*g.stride - g.padT
			for ow := 0; ow < g.ow; ow++ {
				iw0 := ow*g.stride - g.padL
				row := cols[r*k : (r+1)*k]
				r++
				interior := iw0 >= 0 && iw0+g.kw <= g.w
				for kh := 0; kh < g.kh; kh++ {
					dst := row[kh*seg : (kh+1)*seg]
					ih := ih0 + kh
					if ih < 0 || ih >= g.h {
						clear(dst)
						continue
					}
					base := (ih*g.w + iw0) * g.c
					if interior {
						copySmall(dst, img[base:base+seg])
						continue
					}
					for kw := 0; kw < g.kw; kw++ {
						iw := iw0 + kw
						d := dst[kw*g.c : (kw+1)*g.c]
						if iw < 0 || iw >= g.w {
							clear(d)
						} else {
							copy(d, img[base+kw*g.c:base+(kw+1)*g.c])
						}
					}
				}
			}
		}
	}
}

// im2col1x3x3 is im2col for a one-channel input, a 3x3 kernel and stride
// 1 (a first conv layer): each image is copied once into pad with its
// zero border, so every receptive field is 3 runs of 3 floats at fixed
// offsets, with no border tests. It returns pad for reuse.
func im2col1x3x3(cols, x []float32, g convGeom, pad []float32) []float32 {
	hp, wp := g.oh+2, g.ow+2
	pad = growFloat32(pad, hp*wp)
	clear(pad)
	r := 0
	for n := 0; n < g.n; n++ {
		img := x[n*g.h*g.w : (n+1)*g.h*g.w]
		for i := 0; i < g.h; i++ {
			pi := i + g.padT
			if pi < 0 || pi >= hp {
				continue
			}
			// Columns falling outside the padded width (Valid padding
			// never reads them) are dropped.
			lo, hi := max(0, -g.padL), min(g.w, wp-g.padL)
			if lo < hi {
				copy(pad[pi*wp+lo+g.padL:pi*wp+hi+g.padL], img[i*g.w+lo:i*g.w+hi])
			}
		}
		for oh := 0; oh < g.oh; oh++ {
			s0 := pad[oh*wp : oh*wp+wp]
			s1 := pad[(oh+1)*wp : (oh+1)*wp+wp]
			s2 := pad[(oh+2)*wp : (oh+2)*wp+wp]
			for ow := 0; ow < g.ow; ow++ {
				row := cols[r*9 : r*9+9]
				r++
				a, b, c := s0[ow:ow+3], s1[ow:ow+3], s2[ow:ow+3]
				row[0], row[1], row[2] = a[0], a[1], a[2]
				row[3], row[4], row[5] = b[0], b[1], b[2]
				row[6], row[7], row[8] = c[0], c[1], c[2]
			}
		}
	}
	return pad
}

// col2im is the adjoint of im2col: it scatter-adds each row of dcols back
// onto the input positions it was read from. dx must be zeroed.
func col2im(dx, dcols []float32, g convGeom) {
	k := g.kh * g.kw * g.c
	seg := g.kw * g.c
	r := 0
	for n := 0; n < g.n; n++ {
		img := dx[n*g.h*g.w*g.c : (n+1)*g.h*g.w*g.c]
		for oh := 0; oh < g.oh; oh++ {
			ih0 := oh*g.stride - g.padT
			for ow := 0; ow < g.ow; ow++ {
				iw0 := ow*g.stride - g.padL
				row := dcols[r*k : (r+1)*k]
				r++
				interior := iw0 >= 0 && iw0+g.kw <= g.w
				for kh := 0; kh < g.kh; kh++ {
					ih := ih0 + kh
					if ih < 0 || ih >= g.h {
						continue
					}
					src := row[kh*seg : (kh+1)*seg]
					base := (ih*g.w + iw0) * g.c
					if interior {
						addTo(img[base:base+seg], src)
						continue
					}
					for kw := 0; kw < g.kw; kw++ {
						iw := iw0 + kw
						if iw < 0 || iw >= g.w {
							continue
						}
						addTo(img[base+kw*g.c:base+(kw+1)*g.c], src[kw*g.c:(kw+1)*g.c])
					}
				}
			}
		}
	}
}

// addTo does dst[i] += src[i], vectorized where the CPU allows.
func addTo(dst, src []float32) {
	if len(src) >= 8 && kernels.AddTo(dst, src) {
		return
	}
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] += v
	}
}

// copySmall is copy() with an inline loop for short runs: a first conv
// layer with one input channel copies 3 floats at a time, where the
// memmove call overhead dominates.
func copySmall(dst, src []float32) {
	if len(src) >= 16 {
		copy(dst, src)
		return
	}
	if len(src) == 3 { // a 3-wide kernel row of a one-channel image
		dst = dst[:3]
		dst[0], dst[1], dst[2] = src[0], src[1], src[2]
		return
	}
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = v
	}
}

// Geometry returns the kernel size, stride and padding (what an exporter
// needs besides the parameters).
func (c *Conv2D) Geometry() (kH, kW, stride int, padding Padding) {
	return c.kH, c.kW, c.stride, c.padding
}

// Padding returns the padding before and after along an axis of size in,
// and the output size: TensorFlow's split for Same, none for Valid.
func (c *Conv2D) Padding(in, k int) (before, after, out int) {
	out, before = outSize(in, k, c.stride, c.padding)
	if c.padding == Same {
		after = max((out-1)*c.stride+k-in, 0) - before
	}
	return before, after, out
}
