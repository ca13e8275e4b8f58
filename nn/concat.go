package nn

import "fmt"

// Concat joins per-example features side by side: each input [N, ...] is
// flattened to [N, k_i] and the output is [N, k_1+k_2+...], with input 0's
// features first. It takes several inputs, so it is not a Layer; it is the
// join between Embedding outputs (and dense features) and a Dense tower.
type Concat struct {
	name   string
	n      int
	widths []int
	shapes [][]int // input shapes, for the gradients' shapes
	y      *Tensor
	dxs    []*Tensor
}

// NewConcat returns a Concat.
func NewConcat(name string) *Concat { return &Concat{name: name} }

// Name returns the name given to NewConcat.
func (c *Concat) Name() string { return c.name }

// Forward concatenates xs. All inputs must have rank >= 1 and the same
// batch size N. The result is owned by c and valid until the next Forward.
func (c *Concat) Forward(xs ...*Tensor) *Tensor {
	if len(xs) == 0 {
		panic(fmt.Sprintf("nn: %s: no inputs", c.name))
	}
	// Validate everything before touching c, so a panicking call leaves
	// the previous Forward's state intact.
	n, total := 0, 0
	for i, x := range xs {
		if len(x.Shape) < 1 {
			panic(fmt.Sprintf("nn: %s: input %d is a scalar", c.name, i))
		}
		if i == 0 {
			n = x.Shape[0]
		} else if x.Shape[0] != n {
			panic(fmt.Sprintf("nn: %s: input %d has %d rows, input 0 has %d", c.name, i, x.Shape[0], n))
		}
		w := width(x.Shape)
		if len(x.Data) != n*w {
			panic(fmt.Sprintf("nn: %s: input %d has shape %v but %d values", c.name, i, x.Shape, len(x.Data)))
		}
		total += w
	}
	c.widths = c.widths[:0]
	for i, x := range xs {
		c.widths = append(c.widths, width(x.Shape))
		// Keep copies of the shapes: inputs may be reshaped views that
		// their owners rewrite.
		if i < len(c.shapes) {
			c.shapes[i] = append(c.shapes[i][:0], x.Shape...)
		} else {
			c.shapes = append(c.shapes, append([]int(nil), x.Shape...))
		}
	}
	c.shapes = c.shapes[:len(xs)]
	c.n = n
	c.y = ensure(c.y, n, total)
	y := c.y.Data
	for r := 0; r < n; r++ {
		at := r * total
		for i, x := range xs {
			w := c.widths[i]
			copy(y[at:at+w], x.Data[r*w:(r+1)*w])
			at += w
		}
	}
	return c.y
}

// width is the number of features per example of a [N, ...] shape.
func width(shape []int) int {
	w := 1
	for _, d := range shape[1:] {
		w *= d
	}
	return w
}

// Backward splits dy [N, Σk_i] into one gradient per input of the last
// Forward, each with that input's shape. The tensors are owned by c and
// valid until the next Backward.
func (c *Concat) Backward(dy *Tensor) []*Tensor {
	total := 0
	for _, w := range c.widths {
		total += w
	}
	if c.y == nil || !sameShape(dy.Shape, []int{c.n, total}) {
		panic(fmt.Sprintf("nn: %s: Backward dy shape %v, want [%d %d]", c.name, dy.Shape, c.n, total))
	}
	for len(c.dxs) < len(c.widths) {
		c.dxs = append(c.dxs, nil)
	}
	c.dxs = c.dxs[:len(c.widths)]
	for i := range c.widths {
		c.dxs[i] = ensure(c.dxs[i], c.shapes[i]...)
	}
	for r := 0; r < c.n; r++ {
		at := r * total
		for i, w := range c.widths {
			copy(c.dxs[i].Data[r*w:(r+1)*w], dy.Data[at:at+w])
			at += w
		}
	}
	return c.dxs
}
