package nn

import (
	"fmt"

	"elasticdl/nn/internal/kernels"
)

// MaxPool2D is max pooling over size×size windows on NHWC input, without
// padding: out = floor((in-size)/stride)+1.
type MaxPool2D struct {
	name         string
	size, stride int
	inShape      [4]int
	argmax       []int32 // flat input index of each output's maximum
	y, dx        *Tensor
}

// NewMaxPool2D returns a max-pooling layer.
func NewMaxPool2D(name string, size, stride int) *MaxPool2D {
	if size <= 0 || stride <= 0 {
		panic(fmt.Sprintf("nn: NewMaxPool2D(%q): bad size=%d stride=%d", name, size, stride))
	}
	return &MaxPool2D{name: name, size: size, stride: stride}
}

// Name implements Layer.
func (p *MaxPool2D) Name() string { return p.name }

// Params implements Layer; pooling has none.
func (p *MaxPool2D) Params() []*Param { return nil }

// Forward implements Layer.
func (p *MaxPool2D) Forward(x *Tensor, train bool) *Tensor {
	checkRank(p.name, x, 4)
	n, h, w, c := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	oh, ow := 0, 0
	if h >= p.size && w >= p.size {
		oh, ow = (h-p.size)/p.stride+1, (w-p.size)/p.stride+1
	}
	p.inShape = [4]int{n, h, w, c}
	p.y = ensure(p.y, n, oh, ow, c)
	p.argmax = ensureInt32(p.argmax, p.y.Len())
	out, idx, xd := p.y.Data, p.argmax, x.Data
	o := 0
	// Channels are innermost in NHWC, so each window position is compared
	// as a contiguous vector of C values. The running max and its index are
	// updated without branches: which window element wins is essentially
	// random, and a mispredicted branch per element dominated this loop.
	if p.size == 2 {
		p.forward2(xd, n, h, w, c, oh, ow)
		return p.y
	}
	for b := 0; b < n; b++ {
		for i := 0; i < oh; i++ {
			for j := 0; j < ow; j++ {
				orow, irow := out[o:o+c], idx[o:o+c]
				base0 := ((b*h+i*p.stride)*w + j*p.stride) * c
				copy(orow, xd[base0:base0+c])
				for ch := range irow {
					irow[ch] = int32(base0 + ch)
				}
				for ki := 0; ki < p.size; ki++ {
					for kj := 0; kj < p.size; kj++ {
						if ki == 0 && kj == 0 {
							continue
						}
						base := ((b*h+i*p.stride+ki)*w + j*p.stride + kj) * c
						in := xd[base : base+c]
						irow := irow[:len(in)]
						orow := orow[:len(in)]
						for ch, v := range in {
							// Strict > keeps the first maximum on ties.
							gt := b2i(v > orow[ch])
							orow[ch] = max(orow[ch], v)
							irow[ch] += gt * (int32(base+ch) - irow[ch])
						}
					}
				}
				o += c
			}
		}
	}
	return p.y
}

// Backward implements Layer: each output gradient goes to the input
// element that won its window (first one on ties).
func (p *MaxPool2D) Backward(dy *Tensor) *Tensor {
	if !sameShape(dy.Shape, p.y.Shape) {
		panic(fmt.Sprintf("nn: %s: Backward dy shape %v does not match last Forward %v", p.name, dy.Shape, p.y.Shape))
	}
	s := p.inShape
	p.dx = ensure(p.dx, s[0], s[1], s[2], s[3])
	if p.size == 2 && p.stride == 2 && s[1]%2 == 0 && s[2]%2 == 0 && p.backward2(dy.Data) {
		return p.dx
	}
	clear(p.dx.Data) // a vectorized memclr: cheap next to the scatter
	dx, idx := p.dx.Data, p.argmax[:len(dy.Data)]
	if p.stride >= p.size {
		// Windows do not overlap, so each input receives at most one
		// gradient: a plain store. (Writing every dx element once with a
		// mask, instead of clearing, was twice as slow.)
		for i, v := range dy.Data {
			dx[idx[i]] = v
		}
		return p.dx
	}
	for i, v := range dy.Data {
		dx[idx[i]] += v
	}
	return p.dx
}

// b2i converts a comparison to 0/1; the compiler lowers it to SETcc, not a
// branch.
func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// forward2 is Forward specialized for the ubiquitous 2x2 window: one pass
// over the four input vectors, writing each output and index once.
func (p *MaxPool2D) forward2(xd []float32, n, h, w, c, oh, ow int) {
	out, idx := p.y.Data, p.argmax
	o := 0
	for b := 0; b < n; b++ {
		for i := 0; i < oh; i++ {
			if p.stride == 2 {
				b0 := (b*h + 2*i) * w * c
				if kernels.MaxPool2x2Row(xd[b0:], xd[b0+w*c:], out[o:], idx[o:], ow, c, w*c, b0) {
					o += ow * c
					continue
				}
			}
			for j := 0; j < ow; j++ {
				b0 := ((b*h+i*p.stride)*w + j*p.stride) * c
				b1 := b0 + c
				b2 := b0 + w*c
				b3 := b2 + c
				x0, x1, x2, x3 := xd[b0:b0+c], xd[b1:b1+c], xd[b2:b2+c], xd[b3:b3+c]
				orow, irow := out[o:o+c], idx[o:o+c]
				for ch := range orow {
					m, k := x0[ch], int32(b0)
					// Strict > keeps the first maximum on ties.
					g := b2i(x1[ch] > m)
					m = max(m, x1[ch])
					k += g * (int32(b1) - k)
					g = b2i(x2[ch] > m)
					m = max(m, x2[ch])
					k += g * (int32(b2) - k)
					g = b2i(x3[ch] > m)
					m = max(m, x3[ch])
					k += g * (int32(b3) - k)
					orow[ch] = m
					irow[ch] = k + int32(ch)
				}
				o += c
			}
		}
	}
}

// backward2 handles 2x2/stride-2 pooling over even sizes, where windows
// tile the input, with the vector kernel: every dx element is written
// once (the gradient or 0), with no clearing pass before a scatter. It
// reports false, writing nothing, where the kernel does not apply.
func (p *MaxPool2D) backward2(dy []float32) bool {
	n, h, w, c := p.inShape[0], p.inShape[1], p.inShape[2], p.inShape[3]
	oh, ow := h/2, w/2
	if n == 0 || oh == 0 {
		return false
	}
	dx := p.dx.Data
	o := 0
	for b := 0; b < n; b++ {
		for i := 0; i < oh; i++ {
			b0 := (b*h + 2*i) * w * c
			// Whether the kernel applies is the same for every row, so
			// only the first one, before anything is written, can refuse.
			if !kernels.MaxPool2x2BackRow(dx[b0:], dx[b0+w*c:], dy[o:], p.argmax[o:], ow, c, w*c, b0) {
				return false
			}
			o += ow * c
		}
	}
	return true
}

// Window returns the pooling window's size and stride.
func (p *MaxPool2D) Window() (size, stride int) { return p.size, p.stride }
